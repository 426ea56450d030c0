/* nk_norm.h - kernel family: batch/group/instance/rms norm, losses beyond nll/mse, and small activations with their backward.
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_NORM_H
#define NK_NORM_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif /* NK_NORM_H */
