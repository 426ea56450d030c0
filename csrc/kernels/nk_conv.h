/* nk_conv.h - kernel family: convolution (direct/im2col + GEMM), transposed convolution, im2col/col2im, and their backward.
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_CONV_H
#define NK_CONV_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif /* NK_CONV_H */
