// Package sunrpc is the ONC RPC version 2 core (RFC 5531): call and reply
// headers, AUTH_NONE and AUTH_SYS credentials, a transport-neutral client
// (XIDs, retransmission, reconnection) and server (dispatch by program,
// version and procedure), and the TCP record-marking transport (RFC 5531
// section 11) with RPC-with-TLS (RFC 9289: the AUTH_TLS probe, STARTTLS,
// TLS 1.3 sessions; see TCPOptions.XprtSec). The RPC-over-RDMA transport
// (RFC 8166) lives in pkg/rpcrdma and implements the same ClientTransport
// and Dispatcher contracts.
//
// Messages are split around one DDP-eligible data item (RFC 8166 section 6)
// so that a transport can send or place it without copying: see Message and
// Builder.
package sunrpc
