// Lazy loading of librdmacm and libibverbs; see dl.go.
//
// The package is not linked against the verbs libraries. Each function of
// theirs that verbs.c or the Go side calls is defined here under its own
// name, as a stub that calls through a pointer which rp_load fills with
// dlsym. The header's static inline verbs (ibv_post_send, ibv_poll_cq,
// ibv_req_notify_cq, ...) call through the device context's ops and need
// no symbol. The compiler checks every stub against the prototype in the
// installed headers; a name missing here is a link error.
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "verbs.h"

// rp_unloaded stops the process when a stub runs before rp_load succeeded,
// which the Go side never lets happen (every entry point loads first).
static void rp_unloaded(const char *name)
{
	fprintf(stderr, "rdmapipe: %s called before libibverbs and librdmacm were loaded\n", name);
	abort();
}

// STUB defines name (parenthesized: some are also function-like macros in
// the headers) with the given return type, parameters and arguments; VSTUB
// is the same for functions returning void.
#define STUB(ret, name, params, args)                   \
	static __typeof__(name) *p_##name;              \
	ret(name) params                                \
	{                                               \
		if (!p_##name)                          \
			rp_unloaded(#name);             \
		return p_##name args;                   \
	}
#define VSTUB(name, params, args)                       \
	static __typeof__(name) *p_##name;              \
	void(name) params                               \
	{                                               \
		if (!p_##name)                          \
			rp_unloaded(#name);             \
		p_##name args;                          \
	}

VSTUB(ibv_ack_cq_events, (struct ibv_cq *cq, unsigned int nevents), (cq, nevents))
STUB(struct ibv_pd *, ibv_alloc_pd, (struct ibv_context *context), (context))
STUB(int, ibv_close_device, (struct ibv_context *context), (context))
STUB(struct ibv_comp_channel *, ibv_create_comp_channel, (struct ibv_context *context), (context))
STUB(struct ibv_cq *, ibv_create_cq, (struct ibv_context *context, int cqe, void *cq_context, struct ibv_comp_channel *channel, int comp_vector), (context, cqe, cq_context, channel, comp_vector))
STUB(int, ibv_dealloc_pd, (struct ibv_pd *pd), (pd))
STUB(int, ibv_dereg_mr, (struct ibv_mr *mr), (mr))
STUB(int, ibv_destroy_comp_channel, (struct ibv_comp_channel *channel), (channel))
STUB(int, ibv_destroy_cq, (struct ibv_cq *cq), (cq))
VSTUB(ibv_free_device_list, (struct ibv_device **list), (list))
STUB(int, ibv_get_cq_event, (struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context), (channel, cq, cq_context))
STUB(struct ibv_device **, ibv_get_device_list, (int *num_devices), (num_devices))
STUB(const char *, ibv_get_device_name, (struct ibv_device *device), (device))
STUB(int, ibv_modify_qp, (struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask), (qp, attr, attr_mask))
STUB(struct ibv_context *, ibv_open_device, (struct ibv_device *device), (device))
STUB(int, ibv_query_device, (struct ibv_context *context, struct ibv_device_attr *device_attr), (context, device_attr))
STUB(int, ibv_query_gid, (struct ibv_context *context, uint8_t port_num, int index, union ibv_gid *gid), (context, port_num, index, gid))
STUB(int, ibv_query_port, (struct ibv_context *context, uint8_t port_num, struct _compat_ibv_port_attr *port_attr), (context, port_num, port_attr))
STUB(int, ibv_query_qp, (struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask, struct ibv_qp_init_attr *init_attr), (qp, attr, attr_mask, init_attr))
STUB(struct ibv_mr *, ibv_reg_mr, (struct ibv_pd *pd, void *addr, size_t length, int access), (pd, addr, length, access))
STUB(const char *, ibv_wc_status_str, (enum ibv_wc_status status), (status))

STUB(int, rdma_accept, (struct rdma_cm_id *id, struct rdma_conn_param *conn_param), (id, conn_param))
STUB(int, rdma_ack_cm_event, (struct rdma_cm_event *event), (event))
STUB(int, rdma_bind_addr, (struct rdma_cm_id *id, struct sockaddr *addr), (id, addr))
STUB(int, rdma_connect, (struct rdma_cm_id *id, struct rdma_conn_param *conn_param), (id, conn_param))
STUB(struct rdma_event_channel *, rdma_create_event_channel, (void), ())
STUB(int, rdma_create_id, (struct rdma_event_channel *channel, struct rdma_cm_id **id, void *context, enum rdma_port_space ps), (channel, id, context, ps))
STUB(int, rdma_create_qp, (struct rdma_cm_id *id, struct ibv_pd *pd, struct ibv_qp_init_attr *qp_init_attr), (id, pd, qp_init_attr))
VSTUB(rdma_destroy_event_channel, (struct rdma_event_channel *channel), (channel))
STUB(int, rdma_destroy_id, (struct rdma_cm_id *id), (id))
VSTUB(rdma_destroy_qp, (struct rdma_cm_id *id), (id))
STUB(int, rdma_disconnect, (struct rdma_cm_id *id), (id))
STUB(const char *, rdma_event_str, (enum rdma_cm_event_type event), (event))
STUB(int, rdma_get_cm_event, (struct rdma_event_channel *channel, struct rdma_cm_event **event), (channel, event))
STUB(int, rdma_listen, (struct rdma_cm_id *id, int backlog), (id, backlog))
STUB(int, rdma_migrate_id, (struct rdma_cm_id *id, struct rdma_event_channel *channel), (id, channel))
STUB(int, rdma_reject, (struct rdma_cm_id *id, const void *private_data, uint8_t private_data_len), (id, private_data, private_data_len))
STUB(int, rdma_resolve_addr, (struct rdma_cm_id *id, struct sockaddr *src_addr, struct sockaddr *dst_addr, int timeout_ms), (id, src_addr, dst_addr, timeout_ms))
STUB(int, rdma_resolve_route, (struct rdma_cm_id *id, int timeout_ms), (id, timeout_ms))
STUB(int, rdma_set_option, (struct rdma_cm_id *id, int level, int optname, void *optval, size_t optlen), (id, level, optname, optval, optlen))

// sym names one pointer to fill and the library it comes from.
struct sym {
	int cm; // 1: librdmacm, 0: libibverbs
	const char *name;
	void **p;
};

#define SYM(cm, name) { cm, #name, (void **)&p_##name }

static const struct sym syms[] = {
	SYM(0, ibv_ack_cq_events), SYM(0, ibv_alloc_pd), SYM(0, ibv_close_device),
	SYM(0, ibv_create_comp_channel), SYM(0, ibv_create_cq), SYM(0, ibv_dealloc_pd),
	SYM(0, ibv_dereg_mr), SYM(0, ibv_destroy_comp_channel), SYM(0, ibv_destroy_cq),
	SYM(0, ibv_free_device_list), SYM(0, ibv_get_cq_event), SYM(0, ibv_get_device_list),
	SYM(0, ibv_get_device_name), SYM(0, ibv_modify_qp), SYM(0, ibv_open_device),
	SYM(0, ibv_query_device), SYM(0, ibv_query_gid), SYM(0, ibv_query_port),
	SYM(0, ibv_query_qp), SYM(0, ibv_reg_mr), SYM(0, ibv_wc_status_str),
	SYM(1, rdma_accept), SYM(1, rdma_ack_cm_event), SYM(1, rdma_bind_addr),
	SYM(1, rdma_connect), SYM(1, rdma_create_event_channel), SYM(1, rdma_create_id),
	SYM(1, rdma_create_qp), SYM(1, rdma_destroy_event_channel), SYM(1, rdma_destroy_id),
	SYM(1, rdma_destroy_qp), SYM(1, rdma_disconnect), SYM(1, rdma_event_str),
	SYM(1, rdma_get_cm_event), SYM(1, rdma_listen), SYM(1, rdma_migrate_id),
	SYM(1, rdma_reject), SYM(1, rdma_resolve_addr), SYM(1, rdma_resolve_route),
	SYM(1, rdma_set_option),
};

// rp_load opens libibverbs as verbs and librdmacm as cm, and fills every
// pointer. It returns 0, or -1 with a message (the dlerror text) in err.
// The pointers are only set when all of them resolve.
int rp_load(const char *verbs, const char *cm, char *err, int errlen)
{
	void *lib[2];
	const char *names[2] = { verbs, cm };
	void *found[sizeof syms / sizeof syms[0]];
	for (int i = 0; i < 2; i++) {
		lib[i] = dlopen(names[i], RTLD_NOW | RTLD_GLOBAL);
		if (!lib[i]) {
			snprintf(err, errlen, "%s", dlerror());
			return -1;
		}
	}
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++) {
		dlerror();
		found[i] = dlsym(lib[syms[i].cm], syms[i].name);
		if (!found[i]) {
			const char *e = dlerror();
			snprintf(err, errlen, "%s", e ? e : syms[i].name);
			return -1;
		}
	}
	for (size_t i = 0; i < sizeof syms / sizeof syms[0]; i++)
		*syms[i].p = found[i];
	return 0;
}
