/* ctest.h - minimal C test harness: CHECK(cond, fmt, ...) records a failure and continues;
 * each test file's main() returns ctest_finish(). */
#ifndef CTEST_H
#define CTEST_H
#include <stdio.h>

static int ctest_failures, ctest_checks;

#define CHECK(cond, ...)                                                                      \
	do {                                                                                  \
		ctest_checks++;                                                               \
		if (!(cond)) {                                                                \
			ctest_failures++;                                                     \
			fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
			fprintf(stderr, "" __VA_ARGS__);                                      \
			fprintf(stderr, "\n");                                                \
		}                                                                             \
	} while (0)

#define RUN(test)                                                  \
	do {                                                       \
		int before_ = ctest_failures;                      \
		test();                                            \
		printf("%-48s %s\n", #test, ctest_failures == before_ ? "PASS" : "FAIL"); \
	} while (0)

static inline int ctest_finish(void)
{
	printf("%d checks, %d failures\n", ctest_checks, ctest_failures);
	return ctest_failures ? 1 : 0;
}
#endif
