/* nk_spatial.h - kernel family: pooling (max/avg/adaptive, unpool), interpolation (nearest/linear/cubic/area), padding modes, and their backward.
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_SPATIAL_H
#define NK_SPATIAL_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif /* NK_SPATIAL_H */
