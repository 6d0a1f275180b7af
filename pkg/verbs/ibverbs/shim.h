//go:build ibverbs

// Declarations of the C helpers defined in cgo.go's preamble.
#ifndef GV_SHIM_H
#define GV_SHIM_H
#include <stdint.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

struct swr {
	uint64_t wr_id;
	uint64_t remote_addr;
	uint32_t rkey;
	uint32_t inv_rkey;
	int opcode;
	int flags;
	int num_sge;
};

struct cmev {
	int event;
	int status;
	struct rdma_cm_id *id;
	struct rdma_cm_id *listen_id;
	int pdata_len;
	int responder_resources;
	int initiator_depth;
	unsigned char pdata[256];
};

int gv_nb_fd(int fd);
int gv_query_port(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a);
struct ibv_mr *gv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access);
struct ibv_mw *gv_alloc_mw2(struct ibv_pd *pd);
int gv_dealloc_mw(struct ibv_mw *mw);
uint32_t gv_mw_rkey(struct ibv_mw *mw);
int gv_req_notify(struct ibv_cq *cq);
int gv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
uint32_t gv_wc_inv_rkey(struct ibv_wc *wc);
int gv_get_cq_event(struct ibv_comp_channel *ch);
int gv_post_send(struct ibv_qp *qp, struct swr *d, struct ibv_sge *sg);
int gv_post_bind(struct ibv_qp *qp, uint64_t wr_id, struct ibv_mw *mw, uint32_t rkey,
		struct ibv_mr *mr, uint64_t addr, uint64_t len, int access);
int gv_post_recv(struct ibv_qp *qp, uint64_t wr_id, struct ibv_sge *sg, int n);
struct ibv_qp *gv_create_qp(struct ibv_pd *pd, struct ibv_cq *scq, struct ibv_cq *rcq,
		int sq, int rq, int sge, struct ibv_qp_cap *out);
int gv_qp_to_init(struct ibv_qp *qp, int iwarp, int port);
int gv_qp_to_err(struct ibv_qp *qp);
void gv_set_id_qp(struct rdma_cm_id *id, struct ibv_qp *qp);
struct ibv_context *gv_id_verbs(struct rdma_cm_id *id);
uint8_t gv_id_port(struct rdma_cm_id *id);
int gv_get_cm_event(struct rdma_event_channel *ch, struct cmev *out);
int gv_cm_connect(struct rdma_cm_id *id, void *pd, int pdlen, int rr, int id_depth);
int gv_cm_accept(struct rdma_cm_id *id, void *pd, int pdlen, int rr, int id_depth);
int gv_cm_sockaddr(struct rdma_cm_id *id, int peer, unsigned char *ip, int *port);
int gv_make_sockaddr(unsigned char *ip, int iplen, int port, struct sockaddr_storage *ss);
int gv_cm_resolve_addr(struct rdma_cm_id *id, unsigned char *ip, int iplen, int port, int ms);
int gv_cm_bind(struct rdma_cm_id *id, unsigned char *ip, int iplen, int port);
int gv_cm_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id);
int gv_cm_resolve_route(struct rdma_cm_id *id, int ms);
int gv_cm_listen(struct rdma_cm_id *id, int backlog);
int gv_cm_reject(struct rdma_cm_id *id, void *pd, int len);
int gv_cm_disconnect(struct rdma_cm_id *id);
int gv_cm_destroy_id(struct rdma_cm_id *id);
int gv_errno_val(void);
int gv_get_async_event(struct ibv_context *c, int *type, uint32_t *qpn);
#endif
