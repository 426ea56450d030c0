/* nk_special.h - kernel family: special functions (special.c).
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_SPECIAL_H
#define NK_SPECIAL_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- special functions (special.c): out = f(x[, y]) elementwise over an nk_iter_t ------------- */
/* Operand 0 the output, 1 x, 2 y (binary ops).  Floating dtypes compute in double and round once to
 * the output dtype; the integer ops (GCD, LCM, and HEAVISIDE, SGN on integer dtypes) compute in int64.
 * Formulas follow PyTorch's CPU scalar code (aten/src/ATen/native/Math.h, Cephes); ia: POLYGAMMA n. */
typedef enum {
	/* unary */
	NK_SP_DIGAMMA, NK_SP_LGAMMA, NK_SP_POLYGAMMA, NK_SP_SINC, NK_SP_ENTR, NK_SP_SGN, NK_SP_ANGLE,
	NK_SP_I0, NK_SP_I0E, NK_SP_I1, NK_SP_I1E, /* modified Bessel I0, I1 and their exp(-|x|)-scaled forms */
	/* binary */
	NK_SP_XLOG1PY, NK_SP_ZETA, NK_SP_HEAVISIDE, NK_SP_NEXTAFTER, NK_SP_GCD, NK_SP_LCM,
	NK_SP_CHEBYSHEV_T, NK_SP_CHEBYSHEV_U, NK_SP_CHEBYSHEV_V, NK_SP_CHEBYSHEV_W,
	NK_SP_SHIFTED_CHEBYSHEV_T, NK_SP_SHIFTED_CHEBYSHEV_U, NK_SP_SHIFTED_CHEBYSHEV_V, NK_SP_SHIFTED_CHEBYSHEV_W,
	NK_SP_HERMITE_H, NK_SP_HERMITE_HE, NK_SP_LAGUERRE_L, NK_SP_LEGENDRE_P,
	NK_SP_COUNT
} nk_special_op_t;
typedef struct {
	nk_iter_t it;
	int op;
	int64_t ia;
} nk_special_args_t;
int nk_special_run(void *args);
int nk_special_ref(void *args);

#ifdef __cplusplus
}
#endif
#endif /* NK_SPECIAL_H */
