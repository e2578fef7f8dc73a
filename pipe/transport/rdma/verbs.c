// Small C helpers for package rdma; see verbs.h.
#include <errno.h>
#include <string.h>
#include <netinet/in.h>
#include "verbs.h"

// rp_probe returns how many RDMA devices libibverbs lists, or -errno when it
// cannot list them at all. *open_err is 0 when at least one device opens;
// otherwise it is the errno of the first device that failed to open, whose
// name is copied into name.
int rp_probe(char *name, int namelen, int *open_err)
{
	int n = 0;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return errno ? -errno : -ENOSYS;
	*open_err = ENODEV;
	for (int i = 0; i < n; i++) {
		struct ibv_context *ctx = ibv_open_device(list[i]);
		if (ctx) {
			ibv_close_device(ctx);
			*open_err = 0;
			break;
		}
		if (i == 0) {
			*open_err = errno ? errno : EIO;
			strncpy(name, ibv_get_device_name(list[i]), namelen - 1);
			name[namelen - 1] = 0;
		}
	}
	ibv_free_device_list(list);
	return n;
}

int rp_create_channel(struct rdma_event_channel **ch)
{
	*ch = rdma_create_event_channel();
	return *ch ? 0 : -errno;
}

// rp_get_event takes one event from ch, copies what the Go side needs into
// ev and acknowledges the event at once, so that no event is ever left
// unacknowledged (rdma_destroy_id and rdma_migrate_id wait for that).
// It returns -EAGAIN when ch is non-blocking and no event is pending.
int rp_get_event(struct rdma_event_channel *ch, struct rp_event *ev)
{
	struct rdma_cm_event *e;
	if (rdma_get_cm_event(ch, &e))
		return -errno;
	memset(ev, 0, sizeof *ev);
	ev->type = e->event;
	ev->status = e->status;
	ev->id = e->id;
	// All ids of this package are RDMA_PS_TCP: param is always conn.
	const struct rdma_conn_param *c = &e->param.conn;
	if (c->private_data && c->private_data_len) {
		ev->priv_len = c->private_data_len < RP_PRIV_MAX ? c->private_data_len : RP_PRIV_MAX;
		memcpy(ev->priv, c->private_data, ev->priv_len);
	}
	ev->responder_resources = c->responder_resources;
	ev->initiator_depth = c->initiator_depth;
	rdma_ack_cm_event(e);
	return 0;
}

int rp_create_id(struct rdma_event_channel *ch, struct rdma_cm_id **id)
{
	return rdma_create_id(ch, id, NULL, RDMA_PS_TCP) ? -errno : 0;
}

// rp_sockaddr fills ss with an IPv4 (ip[0:4]) or IPv6 (ip[0:16]) address.
int rp_sockaddr(struct sockaddr_storage *ss, int family, const uint8_t *ip, int port, uint32_t scope)
{
	memset(ss, 0, sizeof *ss);
	if (family == AF_INET) {
		struct sockaddr_in *s = (struct sockaddr_in *)ss;
		s->sin_family = AF_INET;
		s->sin_port = htons(port);
		memcpy(&s->sin_addr, ip, 4);
		return 0;
	}
	if (family == AF_INET6) {
		struct sockaddr_in6 *s = (struct sockaddr_in6 *)ss;
		s->sin6_family = AF_INET6;
		s->sin6_port = htons(port);
		s->sin6_scope_id = scope;
		memcpy(&s->sin6_addr, ip, 16);
		return 0;
	}
	return -EAFNOSUPPORT;
}

// rp_addr_of is the reverse of rp_sockaddr: it returns the family (0 if
// unknown) and stores the address, port and IPv6 scope.
int rp_addr_of(const struct sockaddr *sa, uint8_t *ip, int *port, uint32_t *scope)
{
	if (sa->sa_family == AF_INET) {
		const struct sockaddr_in *s = (const struct sockaddr_in *)sa;
		memcpy(ip, &s->sin_addr, 4);
		*port = ntohs(s->sin_port);
		return AF_INET;
	}
	if (sa->sa_family == AF_INET6) {
		const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)sa;
		memcpy(ip, &s->sin6_addr, 16);
		*port = ntohs(s->sin6_port);
		*scope = s->sin6_scope_id;
		return AF_INET6;
	}
	return 0;
}

int rp_resolve_addr(struct rdma_cm_id *id, struct sockaddr_storage *dst, int timeout_ms)
{
	return rdma_resolve_addr(id, NULL, (struct sockaddr *)dst, timeout_ms) ? -errno : 0;
}

// rp_set_afonly makes an IPv6 id accept IPv6 connections only.
int rp_set_afonly(struct rdma_cm_id *id)
{
	int one = 1;
	return rdma_set_option(id, RDMA_OPTION_ID, RDMA_OPTION_ID_AFONLY, &one, sizeof one) ? -errno : 0;
}

// rp_bind binds the id to a local address, and so to its RDMA device.
int rp_bind(struct rdma_cm_id *id, struct sockaddr_storage *addr)
{
	return rdma_bind_addr(id, (struct sockaddr *)addr) ? -errno : 0;
}

int rp_bind_listen(struct rdma_cm_id *id, struct sockaddr_storage *addr, int backlog)
{
	if (rdma_bind_addr(id, (struct sockaddr *)addr))
		return -errno;
	return rdma_listen(id, backlog) ? -errno : 0;
}

// rp_device_name returns the name of the device the id is bound to, or NULL.
const char *rp_device_name(struct rdma_cm_id *id)
{
	return id->verbs ? ibv_get_device_name(id->verbs->device) : NULL;
}

// rp_is_iwarp reports whether the id's device is an iWARP device.
int rp_is_iwarp(struct rdma_cm_id *id)
{
	return id->verbs->device->transport_type == IBV_TRANSPORT_IWARP;
}

// rp_source_gid copies the source GID rdma_cm chose for the id.
void rp_source_gid(struct rdma_cm_id *id, uint8_t gid[16])
{
	memcpy(gid, id->route.addr.addr.ibaddr.sgid.raw, 16);
}

// rp_query_gid copies entry index of the GID table of the id's port.
int rp_query_gid(struct rdma_cm_id *id, int index, uint8_t gid[16])
{
	union ibv_gid g;
	if (ibv_query_gid(id->verbs, id->port_num, index, &g))
		return errno ? -errno : -EINVAL;
	memcpy(gid, g.raw, 16);
	return 0;
}

// rp_reg_mr registers len bytes at addr for local writes, and for remote
// writes too if remote_write (ibv_reg_mr is a macro in recent rdma-core,
// which cgo cannot call).
struct ibv_mr *rp_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int remote_write)
{
	int access = IBV_ACCESS_LOCAL_WRITE | (remote_write ? IBV_ACCESS_REMOTE_WRITE : 0);
	return ibv_reg_mr(pd, addr, len, access);
}

// rp_rd_atom returns the device's limits on RDMA read/atomic resources.
int rp_rd_atom(struct rdma_cm_id *id, int *resp, int *init)
{
	struct ibv_device_attr a;
	int ret = ibv_query_device(id->verbs, &a);
	if (ret)
		return -ret;
	*resp = a.max_qp_rd_atom;
	*init = a.max_qp_init_rd_atom;
	return 0;
}

// rp_create_qp creates the id's RC queue pair with explicit capacities and
// returns the inline data size it got. Some devices refuse inline data: then
// it retries without.
int rp_create_qp(struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_cq *cq,
                 int send_wr, int recv_wr, int inline_data)
{
	for (;;) {
		struct ibv_qp_init_attr a;
		memset(&a, 0, sizeof a);
		a.qp_type = IBV_QPT_RC;
		a.send_cq = cq;
		a.recv_cq = cq;
		a.cap.max_send_wr = send_wr;
		a.cap.max_recv_wr = recv_wr;
		a.cap.max_send_sge = 1;
		a.cap.max_recv_sge = 1;
		a.cap.max_inline_data = inline_data;
		if (rdma_create_qp(id, pd, &a) == 0)
			return a.cap.max_inline_data;
		if (inline_data == 0)
			return -errno;
		inline_data = 0;
	}
}

// conn_param fills the connection parameters both sides use: private data,
// RDMA read/atomic limits, and retry_count 7 and rnr_retry_count 7
// (infinite), which make a receiver that is momentarily out of posted
// buffers delay the sender instead of failing the connection.
static void conn_param(struct rdma_conn_param *p, const void *priv, int len, int resp, int init)
{
	memset(p, 0, sizeof *p);
	p->private_data = priv;
	p->private_data_len = len;
	p->responder_resources = resp;
	p->initiator_depth = init;
	p->retry_count = 7;
	p->rnr_retry_count = 7;
}

// rp_connect starts the active side's connection; depth is used for both
// RDMA read/atomic limits.
int rp_connect(struct rdma_cm_id *id, const void *priv, int len, int depth)
{
	struct rdma_conn_param p;
	conn_param(&p, priv, len, depth, depth);
	return rdma_connect(id, &p) ? -errno : 0;
}

// rp_accept accepts a connection request on the passive side.
int rp_accept(struct rdma_cm_id *id, const void *priv, int len, int resp, int init)
{
	struct rdma_conn_param p;
	conn_param(&p, priv, len, resp, init);
	return rdma_accept(id, &p) ? -errno : 0;
}

int rp_reject(struct rdma_cm_id *id, const void *priv, int len)
{
	return rdma_reject(id, priv, len) ? -errno : 0;
}

// rp_set_rnr_timer sets how long a peer whose SEND found no posted receive
// waits before retrying. rdma_cm leaves it at 0, which in the IB encoding
// means the maximum, 655 ms; 12 means 0.64 ms. Changing it is allowed in
// RTS; transports without RNR (iWARP) may refuse, which is harmless.
int rp_set_rnr_timer(struct ibv_qp *qp, int timer)
{
	struct ibv_qp_attr a;
	memset(&a, 0, sizeof a);
	a.min_rnr_timer = timer;
	int ret = ibv_modify_qp(qp, &a, IBV_QP_MIN_RNR_TIMER);
	return ret ? -ret : 0;
}

// post posts one signaled work request of opcode for len bytes at addr (a
// zero-length one uses no scatter/gather entry), with flags added to
// IBV_SEND_SIGNALED, immediate data imm (host order) and, for RDMA
// operations, the peer's raddr and rkey.
static int post(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey,
                enum ibv_wr_opcode opcode, int flags, uint32_t imm, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = len ? 1 : 0;
	wr.opcode = opcode;
	wr.send_flags = IBV_SEND_SIGNALED | flags;
	wr.imm_data = htonl(imm);
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	int ret = ibv_post_send(qp, &wr, &bad);
	return ret ? -ret : 0;
}

// rp_post_send posts one signaled SEND of len bytes at addr. inl asks for
// IBV_SEND_INLINE; with_imm makes it a SEND with immediate imm (host order).
int rp_post_send(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len,
                 uint32_t lkey, int inl, int with_imm, uint32_t imm)
{
	return post(qp, wr_id, addr, len, lkey, with_imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND,
	            inl ? IBV_SEND_INLINE : 0, imm, 0, 0);
}

// rp_post_write_imm posts one signaled RDMA WRITE with immediate of len
// bytes at addr to raddr (rkey) of the peer; imm (host order) arrives with
// the completion of one of the peer's posted receives.
int rp_post_write_imm(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len,
                      uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm)
{
	return post(qp, wr_id, addr, len, lkey, IBV_WR_RDMA_WRITE_WITH_IMM, 0, imm, raddr, rkey);
}

// rp_post_write_split posts len bytes at addr to raddr (rkey) of the peer
// as RDMA WRITEs of at most piece bytes, chained RP_SPLIT_BATCH to an
// ibv_post_send: unsignaled plain WRITEs (work request id piece_id, seen
// only if they fail), then the last piece as one signaled WRITE with
// immediate imm (host order) and id wr_id, whose completion at the peer
// says that all of it has landed: an RC queue pair places its WRITEs in
// order.
#define RP_SPLIT_BATCH 32
int rp_post_write_split(struct ibv_qp *qp, uint64_t wr_id, uint64_t piece_id, void *addr, uint32_t len,
                        uint32_t lkey, uint64_t raddr, uint32_t rkey, uint32_t imm, uint32_t piece)
{
	struct ibv_sge sge[RP_SPLIT_BATCH];
	struct ibv_send_wr wr[RP_SPLIT_BATCH], *bad;
	uint32_t off = 0;
	for (;;) {
		int n = 0, last = 0;
		memset(wr, 0, sizeof wr);
		while (n < RP_SPLIT_BATCH && !last) {
			uint32_t k = len - off < piece ? len - off : piece;
			sge[n].addr = (uintptr_t)addr + off;
			sge[n].length = k;
			sge[n].lkey = lkey;
			wr[n].sg_list = &sge[n];
			wr[n].num_sge = k ? 1 : 0;
			wr[n].wr.rdma.remote_addr = raddr + off;
			wr[n].wr.rdma.rkey = rkey;
			off += k;
			if (off == len) {
				wr[n].wr_id = wr_id;
				wr[n].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
				wr[n].send_flags = IBV_SEND_SIGNALED;
				wr[n].imm_data = htonl(imm);
				last = 1;
			} else {
				wr[n].wr_id = piece_id;
				wr[n].opcode = IBV_WR_RDMA_WRITE;
			}
			if (n > 0)
				wr[n - 1].next = &wr[n];
			n++;
		}
		int ret = ibv_post_send(qp, wr, &bad);
		if (ret)
			return -ret;
		if (last)
			return 0;
	}
}

// rp_post_recv posts one receive of up to len bytes at addr.
int rp_post_recv(struct ibv_qp *qp, uint64_t wr_id, void *addr, uint32_t len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_recv_wr wr, *bad;
	memset(&wr, 0, sizeof wr);
	wr.wr_id = wr_id;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	int ret = ibv_post_recv(qp, &wr, &bad);
	return ret ? -ret : 0;
}

// rp_poll takes up to n completions from cq into wcs and returns how many.
// If ibv_poll_cq fails, it stops there, stores its (negative) return value
// in *rc and errno in *err (0 if the provider set none), and still returns
// the completions taken before; otherwise *rc is 0.
int rp_poll(struct ibv_cq *cq, struct rp_wc *wcs, int n, int *rc, int *err)
{
	struct ibv_wc wc[32];
	int got = 0;
	*rc = 0;
	*err = 0;
	while (got < n) {
		int want = n - got < 32 ? n - got : 32;
		errno = 0;
		int k = ibv_poll_cq(cq, want, wc);
		if (k < 0) {
			*rc = k;
			*err = errno;
			return got;
		}
		for (int i = 0; i < k; i++) {
			wcs[got + i].wr_id = wc[i].wr_id;
			wcs[got + i].status = wc[i].status;
			wcs[got + i].byte_len = wc[i].byte_len;
			wcs[got + i].has_imm = (wc[i].wc_flags & IBV_WC_WITH_IMM) != 0;
			wcs[got + i].imm = ntohl(wc[i].imm_data);
			wcs[got + i].write = wc[i].opcode == IBV_WC_RECV_RDMA_WITH_IMM;
		}
		got += k;
		if (k < want)
			break;
	}
	return got;
}

// rp_arm requests an event on the completion channel for the next completion.
int rp_arm(struct ibv_cq *cq)
{
	int ret = ibv_req_notify_cq(cq, 0);
	return ret ? -ret : 0;
}

// rp_get_cq_event takes one event from the (non-blocking) completion channel:
// it returns 1 if it got one, 0 if none was pending, or -errno.
int rp_get_cq_event(struct ibv_comp_channel *cc)
{
	struct ibv_cq *cq;
	void *ctx;
	if (ibv_get_cq_event(cc, &cq, &ctx) == 0)
		return 1;
	return errno == EAGAIN ? 0 : -errno;
}

// mtu_bytes converts an enum ibv_mtu to bytes (0 if unknown).
static int mtu_bytes(enum ibv_mtu m)
{
	return m >= IBV_MTU_256 && m <= IBV_MTU_4096 ? 128 << m : 0;
}

// rp_port_mtu opens the device called name and stores the active and the
// largest MTU of its port, in bytes. It returns -ENODEV if libibverbs does
// not list the device, else -errno of the first call that failed.
int rp_port_mtu(const char *name, int port, int *active, int *max)
{
	int n = 0, ret = -ENODEV;
	struct ibv_device **list = ibv_get_device_list(&n);
	if (!list)
		return errno ? -errno : -ENOSYS;
	for (int i = 0; i < n; i++) {
		if (strcmp(ibv_get_device_name(list[i]), name) != 0)
			continue;
		struct ibv_context *ctx = ibv_open_device(list[i]);
		if (!ctx) {
			ret = errno ? -errno : -EIO;
			break;
		}
		struct ibv_port_attr a;
		int rc = ibv_query_port(ctx, port, &a);
		if (rc == 0) {
			*active = mtu_bytes(a.active_mtu);
			*max = mtu_bytes(a.max_mtu);
		}
		ret = rc ? -rc : 0;
		ibv_close_device(ctx);
		break;
	}
	ibv_free_device_list(list);
	return ret;
}

// rp_qp_sgid_index stores the source GID index of a connected queue pair's
// path, or -1 when the path has no global route header (InfiniBand within
// one subnet, iWARP).
int rp_qp_sgid_index(struct ibv_qp *qp, int *index)
{
	struct ibv_qp_attr a;
	struct ibv_qp_init_attr init;
	int rc = ibv_query_qp(qp, &a, IBV_QP_AV, &init);
	if (rc)
		return -rc;
	*index = a.ah_attr.is_global ? a.ah_attr.grh.sgid_index : -1;
	return 0;
}
