/*
 * Small C helpers for package rdma. They exist so that the Go side never
 * touches C unions or inline verbs functions, and so that each hot-path
 * operation (one post, one batch of completions) costs one cgo call.
 * Errors are returned as negative errno values.
 */
#ifndef RDMAPIPE_VERBS_H
#define RDMAPIPE_VERBS_H

#include <stdint.h>
#include <sys/socket.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

/* Private data bytes copied out of a CM event: as many as an IB/RoCE accept
 * (REP) carries, which holds a listener's device addresses (nics.go). */
#define RP_PRIV_MAX 196

/* rp_event is the part of a struct rdma_cm_event that the Go side needs. */
struct rp_event {
	int type;                   /* enum rdma_cm_event_type */
	int status;                 /* event status: -errno or a CM reject reason */
	struct rdma_cm_id *id;      /* the id the event is for (the new id on CONNECT_REQUEST) */
	uint8_t priv[RP_PRIV_MAX];  /* start of the private data */
	int priv_len;               /* bytes valid in priv */
	uint8_t responder_resources;
	uint8_t initiator_depth;
};

/* rp_wc is the part of a struct ibv_wc that the Go side needs. */
struct rp_wc {
	uint64_t wr_id;
	uint32_t status;            /* enum ibv_wc_status */
	uint32_t byte_len;
	uint32_t imm;               /* immediate data, host order, if has_imm */
	uint8_t has_imm;            /* the completion carries immediate data */
	uint8_t write;              /* a receive completed by an RDMA WRITE with immediate */
};

int rp_load(const char *verbs, const char *cm, char *err, int errlen);
int rp_probe(char *name, int namelen, int *open_err);
int rp_create_channel(struct rdma_event_channel **ch);
int rp_get_event(struct rdma_event_channel *ch, struct rp_event *ev);
int rp_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id);
int rp_sockaddr(struct sockaddr_storage *ss, int family, const uint8_t *ip, int port, uint32_t scope);
int rp_addr_of(const struct sockaddr *sa, uint8_t *ip, int *port, uint32_t *scope);
int rp_resolve_addr(struct rdma_cm_id *id, struct sockaddr_storage *dst, int timeout_ms);
int rp_set_afonly(struct rdma_cm_id *id);
int rp_bind(struct rdma_cm_id *id, struct sockaddr_storage *addr);
int rp_bind_listen(struct rdma_cm_id *id, struct sockaddr_storage *addr, int backlog);
const char *rp_device_name(struct rdma_cm_id *id);
int rp_is_iwarp(struct rdma_cm_id *id);
void rp_source_gid(struct rdma_cm_id *id, uint8_t gid[16]);
int rp_query_gid(struct rdma_cm_id *id, int index, uint8_t gid[16]);
struct ibv_mr *rp_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int remote_write);
int rp_rd_atom(struct rdma_cm_id *id, int *resp, int *init);
int rp_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq,
                 int send_wr, int recv_wr, int inline_data);
int rp_connect(struct rdma_cm_id *id, const void *priv, int len, int depth);
int rp_accept(struct rdma_cm_id *id, const void *priv, int len, int resp, int init);
int rp_reject(struct rdma_cm_id *id, const void *priv, int len);
int rp_set_rnr_timer(struct ibv_qp *qp, int timer);
int rp_post_send(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len,
                 uint32_t lkey, int inl, int with_imm, uint32_t imm);
int rp_post_write_imm(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len,
                      uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm);
int rp_post_write_split(struct ibv_qp *qp, uint64_t wr_id, uint64_t piece_id, void *addr, uint32_t len,
                        uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm, uint32_t piece);
int rp_post_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey);
int rp_poll(struct ibv_cq *cq, struct rp_wc *wcs, int n, int *rc, int *err);
int rp_arm(struct ibv_cq *cq);
int rp_get_cq_event(struct ibv_comp_channel *cc);
int rp_port_mtu(const char *name, int port, int *active, int *max);
int rp_qp_sgid_index(struct ibv_qp *qp, int *index);

#endif
