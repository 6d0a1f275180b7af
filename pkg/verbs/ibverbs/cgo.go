//go:build ibverbs

package ibverbs

/*
#cgo LDFLAGS: -libverbs -lrdmacm
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include "shim.h"

// Wrappers for libibverbs' static inline functions and macros, which cgo
// cannot call directly, and flat argument structs so that Go never builds
// a C struct holding a pointer.

int gv_nb_fd(int fd) {
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0) return -errno;
	if (fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0) return -errno;
	return 0;
}

int gv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a) {
	return ibv_query_port(c, port, a);
}

struct ibv_mr *gv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
	return ibv_reg_mr(pd, addr, len, access);
}

struct ibv_mw *gv_alloc_mw2(struct ibv_pd *pd) { return ibv_alloc_mw(pd, IBV_MW_TYPE_2); }
int gv_dealloc_mw(struct ibv_mw *mw) { return ibv_dealloc_mw(mw); }
uint32_t gv_mw_rkey(struct ibv_mw *mw) { return mw->rkey; }

int gv_req_notify(struct ibv_cq *cq) { return ibv_req_notify_cq(cq, 0); }

int gv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc) { return ibv_poll_cq(cq, n, wc); }

uint32_t gv_wc_inv_rkey(struct ibv_wc *wc) { return wc->invalidated_rkey; }

// get_cq_event consumes one completion-channel event (non-blocking fd) and
// acknowledges it. 1: an event, 0: none (EAGAIN), <0: -errno.
int gv_get_cq_event(struct ibv_comp_channel *ch) {
	struct ibv_cq *cq; void *ctx;
	if (ibv_get_cq_event(ch, &cq, &ctx)) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
		return -errno;
	}
	ibv_ack_cq_events(cq, 1);
	return 1;
}


int gv_post_send(struct ibv_qp *qp, struct swr *d, struct ibv_sge *sg) {
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = d->wr_id;
	wr.sg_list = d->num_sge ? sg : NULL;
	wr.num_sge = d->num_sge;
	wr.opcode = d->opcode;
	wr.send_flags = d->flags;
	switch (d->opcode) {
	case IBV_WR_RDMA_WRITE:
	case IBV_WR_RDMA_READ:
		wr.wr.rdma.remote_addr = d->remote_addr;
		wr.wr.rdma.rkey = d->rkey;
		break;
	case IBV_WR_SEND_WITH_INV:
		// libsiw (rdma-core 44) sends the STag of wr.rdma.rkey, not
		// invalidate_rkey; wr.rdma is unused by a Send on every other
		// provider, so both carry it.
		wr.wr.rdma.rkey = d->inv_rkey;
		wr.invalidate_rkey = d->inv_rkey;
		break;
	case IBV_WR_LOCAL_INV:
		wr.invalidate_rkey = d->inv_rkey;
		break;
	}
	int r = ibv_post_send(qp, &wr, &bad);
	return r < 0 ? -r : r; // libsiw returns -errno, others errno
}

int gv_post_bind(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mw *mw, uint32_t rkey,
		struct ibv_mr *mr, uint64_t addr, uint64_t len, int access) {
	struct ibv_send_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = rkey;
	wr.bind_mw.bind_info.mr = mr;
	wr.bind_mw.bind_info.addr = addr;
	wr.bind_mw.bind_info.length = len;
	wr.bind_mw.bind_info.mw_access_flags = access;
	int r = ibv_post_send(qp, &wr, &bad);
	if (r == 0) mw->rkey = rkey;
	return r < 0 ? -r : r;
}

int gv_post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_sge *sg, int n) {
	struct ibv_recv_wr wr, *bad = NULL;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = n ? sg : NULL;
	wr.num_sge = n;
	int r = ibv_post_recv(qp, &wr, &bad);
	return r < 0 ? -r : r;
}

struct ibv_qp *gv_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
		int sq, int rq, int sge, struct ibv_qp_cap *out) {
	struct ibv_qp_init_attr a;
	memset(&a, 0, sizeof a);
	a.send_cq = scq;
	a.recv_cq = rcq;
	a.cap.max_send_wr = sq;
	a.cap.max_recv_wr = rq;
	a.cap.max_send_sge = sge;
	a.cap.max_recv_sge = sge;
	a.qp_type = IBV_QPT_RC;
	a.sq_sig_all = 0;
	struct ibv_qp *qp = ibv_create_qp(pd, &a);
	if (qp) *out = a.cap;
	return qp;
}

// qp_to_init moves a fresh QP to INIT: iWARP takes state and access flags;
// InfiniBand/RoCE also the P_Key index and the port.
int gv_qp_to_init(struct ibv_qp *qp, int iwarp, int port) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_INIT;
	a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_WRITE;
	int mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS;
	if (!iwarp) {
		a.pkey_index = 0;
		a.port_num = port;
		mask |= IBV_QP_PKEY_INDEX | IBV_QP_PORT;
	}
	return ibv_modify_qp(qp, &a, mask);
}

int gv_qp_to_err(struct ibv_qp *qp) {
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.qp_state = IBV_QPS_ERR;
	return ibv_modify_qp(qp, &a, IBV_QP_STATE);
}

void gv_set_id_qp(struct rdma_cm_id *id, struct ibv_qp *qp) { id->qp = qp; }
struct ibv_context *gv_id_verbs(struct rdma_cm_id *id) { return id->verbs; }
uint8_t gv_id_port(struct rdma_cm_id *id) { return id->port_num; }

// Connection-manager event, copied out of the rdma_cm_event, which is
// acknowledged before get_cm_event returns.

// get_cm_event: 1 an event, 0 none (EAGAIN), <0 -errno.
int gv_get_cm_event(struct rdma_event_channel *ch, struct cmev *out) {
	struct rdma_cm_event *ev;
	if (rdma_get_cm_event(ch, &ev)) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
		return -errno;
	}
	out->event = ev->event;
	out->status = ev->status;
	out->id = ev->id;
	out->listen_id = ev->listen_id;
	out->pdata_len = 0;
	out->responder_resources = ev->param.conn.responder_resources;
	out->initiator_depth = ev->param.conn.initiator_depth;
	if (ev->param.conn.private_data && ev->param.conn.private_data_len) {
		int n = ev->param.conn.private_data_len;
		if (n > (int)sizeof out->pdata) n = sizeof out->pdata;
		memcpy(out->pdata, ev->param.conn.private_data, n);
		out->pdata_len = n;
	}
	rdma_ack_cm_event(ev);
	return 1;
}

int gv_cm_connect(struct rdma_cm_id *id, void *pd, int pdlen, int rr, int id_depth) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.private_data = pd;
	p.private_data_len = pdlen;
	p.responder_resources = rr;
	p.initiator_depth = id_depth;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	return rdma_connect(id, &p) ? -errno : 0;
}

int gv_cm_accept(struct rdma_cm_id *id, void *pd, int pdlen, int rr, int id_depth) {
	struct rdma_conn_param p;
	memset(&p, 0, sizeof p);
	p.private_data = pd;
	p.private_data_len = pdlen;
	p.responder_resources = rr;
	p.initiator_depth = id_depth;
	p.retry_count = 7;
	p.rnr_retry_count = 7;
	return rdma_accept(id, &p) ? -errno : 0;
}

int gv_cm_sockaddr(struct rdma_cm_id *id, int peer, unsigned char *ip, int *port) {
	struct sockaddr *sa = peer ? rdma_get_peer_addr(id) : rdma_get_local_addr(id);
	if (!sa) return -1;
	if (sa->sa_family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)sa;
		memcpy(ip, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return 4;
	}
	if (sa->sa_family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		return 16;
	}
	return -1;
}

int gv_make_sockaddr(unsigned char *ip, int iplen, int port, struct sockaddr_storage *ss) {
	memset(ss, 0, sizeof *ss);
	if (iplen == 4) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		memcpy(&s->sin_addr, ip, 4);
		s->sin_port = htons(port);
		return 0;
	}
	struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
	s->sin6_family = AF_INET6;
	memcpy(&s->sin6_addr, ip, 16);
	s->sin6_port = htons(port);
	return 0;
}

int gv_cm_resolve_addr(struct rdma_cm_id *id, unsigned char *ip, int iplen, int port, int ms) {
	struct sockaddr_storage ss;
	gv_make_sockaddr(ip, iplen, port, &ss);
	return rdma_resolve_addr(id, NULL, (struct sockaddr *)&ss, ms) ? -errno : 0;
}

int gv_cm_bind(struct rdma_cm_id *id, unsigned char *ip, int iplen, int port) {
	struct sockaddr_storage ss;
	gv_make_sockaddr(ip, iplen, port, &ss);
	return rdma_bind_addr(id, (struct sockaddr *)&ss) ? -errno : 0;
}

int gv_cm_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id) {
	return rdma_create_id(ch, id, NULL, RDMA_PS_TCP) ? -errno : 0;
}
int gv_cm_resolve_route(struct rdma_cm_id *id, int ms) { return rdma_resolve_route(id, ms) ? -errno : 0; }
int gv_cm_listen(struct rdma_cm_id *id, int backlog) { return rdma_listen(id, backlog) ? -errno : 0; }
int gv_cm_reject(struct rdma_cm_id *id, void *pd, int len) { return rdma_reject(id, pd, len) ? -errno : 0; }
int gv_cm_disconnect(struct rdma_cm_id *id) { return rdma_disconnect(id) ? -errno : 0; }
int gv_cm_destroy_id(struct rdma_cm_id *id) { id->qp = NULL; return rdma_destroy_id(id) ? -errno : 0; }
// gv_get_async_event reads one asynchronous event (non-blocking fd) and
// acknowledges it: 1 an event (type, QP number or port), 0 none, <0 -errno.
int gv_get_async_event(struct ibv_context *c, int *type, uint32_t *qpn) {
	struct ibv_async_event ev;
	if (ibv_get_async_event(c, &ev)) {
		if (errno == EAGAIN || errno == EWOULDBLOCK) return 0;
		return -errno;
	}
	*type = ev.event_type;
	*qpn = 0;
	switch (ev.event_type) {
	case IBV_EVENT_QP_FATAL:
	case IBV_EVENT_QP_REQ_ERR:
	case IBV_EVENT_QP_ACCESS_ERR:
	case IBV_EVENT_COMM_EST:
	case IBV_EVENT_SQ_DRAINED:
	case IBV_EVENT_PATH_MIG:
	case IBV_EVENT_PATH_MIG_ERR:
	case IBV_EVENT_QP_LAST_WQE_REACHED:
		*qpn = ev.element.qp->qp_num;
		break;
	case IBV_EVENT_PORT_ACTIVE:
	case IBV_EVENT_PORT_ERR:
		*qpn = ev.element.port_num;
		break;
	default:
		break;
	}
	ibv_ack_async_event(&ev);
	return 1;
}

int gv_errno_val(void) { return errno; }
*/
import "C"
