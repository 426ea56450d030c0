/* nk_custom.h - the ABI of user kernels (torchneuron.kernel): what a C kernel compiled at run time sees.
 *
 * A kernel is one C function with the NK_KERNEL signature.  The op's tensor arguments, then its
 * outputs, arrive as descriptors t[0..nt) in the order of the op's schema (outputs last); its float,
 * int and bool arguments as scalars s[0..ns) in schema order.  The launch splits a grid of `grid`
 * work items into tiles of `tile` items and runs the kernel once per tile on the kernel thread pool,
 * tiles in any order and concurrently: a kernel writes only what its tile owns, and its result must
 * not depend on how the grid is split (reduce inside a work item, never across tiles).
 *
 * A kernel returns 0, or nk_fail(tile, "fmt", ...) (which returns 1): the op's stream then holds a
 * sticky error, and the next synchronizing call (print, .item(), torch.neuron.synchronize) raises
 * RuntimeError "<ns::op>: <message>"; the op's outputs stay poisoned, as with any kernel.
 *
 * The header is self-contained (no torch, no project headers) and ships with the Python package; the
 * glue (csrc/torch/ops_custom.cpp) builds the descriptors from the same definitions.
 */
#ifndef NK_CUSTOM_H
#define NK_CUSTOM_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NK_CUSTOM_ABI 1
#define NK_CUSTOM_MAX_DIMS 8
#define NK_CUSTOM_MAX_TENSORS 10 /* inputs + outputs of one op */
#define NK_CUSTOM_MAX_SCALARS 16

/* dtype codes: the kernel library's (nk.h nk_dtype_t) */
enum { NKC_BOOL = 0, NKC_U8, NKC_I8, NKC_I16, NKC_I32, NKC_I64, NKC_F16, NKC_BF16, NKC_F32, NKC_F64 };

/* A tensor: data points at element [0, 0, ...] (the storage offset applied); strides in elements. */
typedef struct {
	void *data;
	int32_t dtype, ndim;
	int64_t numel;
	int64_t sizes[NK_CUSTOM_MAX_DIMS];
	int64_t strides[NK_CUSTOM_MAX_DIMS];
} nk_tensor_t;

/* A scalar argument: both fields are set (an int also as double, a float also truncated to int). */
typedef struct {
	double f;
	int64_t i;
} nk_scalar_t;

typedef struct nk_tile nk_tile_t;
struct nk_tile {
	int64_t begin, end;  /* this tile's work items: [begin, end) of [0, grid) */
	int64_t grid, index; /* the whole grid, and this tile's number */
	int (*fail)(nk_tile_t *tile, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
	void *launch;        /* the launch's private state (the error slot) */
};

#define NK_UNUSED __attribute__((unused))
#define NK_KERNEL(name)                                                                              \
	int name(const nk_tensor_t *t NK_UNUSED, int nt NK_UNUSED, const nk_scalar_t *s NK_UNUSED, \
		 int ns NK_UNUSED, nk_tile_t *tile NK_UNUSED)
typedef int (*nk_kernel_fn_t)(const nk_tensor_t *t, int nt, const nk_scalar_t *s, int ns, nk_tile_t *tile);

/* Records why the kernel failed (the first failing tile's message is kept) and returns 1. */
#define nk_fail(tile, ...) ((tile)->fail((tile), __VA_ARGS__))

/* bf16 / f16 <-> f32, round to nearest even (as PyTorch converts) */
static inline float nk_bf16_to_f32(uint16_t h)
{
	union { uint32_t u; float f; } v = { (uint32_t)h << 16 };
	return v.f;
}
static inline uint16_t nk_f32_to_bf16(float f)
{
	union { float f; uint32_t u; } v = { f };
	if ((v.u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((v.u >> 16) | 0x40); /* NaN stays a quiet NaN */
	return (uint16_t)((v.u + 0x7fffu + ((v.u >> 16) & 1)) >> 16);
}

#ifdef __cplusplus
}
#endif
#endif /* NK_CUSTOM_H */
