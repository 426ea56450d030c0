/* nk_misc.h - kernel family: selection (topk/kthvalue/median/mode/unique/searchsorted/bucketize), special functions, extra random distributions.
 * Included by nk.h; same conventions (argument struct, int nk_<family>_run(void *args), a _ref twin). */
#ifndef NK_MISC_H
#define NK_MISC_H

#ifdef __cplusplus
extern "C" {
#endif

#ifdef __cplusplus
}
#endif
#endif /* NK_MISC_H */
