/*
 * slowfsync: an LD_PRELOAD shim that makes fsync(2) and fdatasync(2) slow,
 * as on a slow disk. The JVM's FileChannel.force (ZooKeeper's transaction
 * log and snapshots) calls them through libc, so the shim's definitions win.
 *
 * While the file named by $SLOWFSYNC_CONTROL exists, every call sleeps a
 * pseudo-random time between $SLOWFSYNC_MIN_MS and $SLOWFSYNC_MAX_MS
 * (defaults 50 and 200) before the real call; otherwise it calls through at
 * once. Tests create and remove the file to slow the disk down and heal it.
 * Built at test time: gcc -shared -fPIC -O2 -o slowfsync.so slowfsync.c -ldl
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static long env_ms(const char *name, long def) {
	const char *v = getenv(name);
	if (v == NULL || *v == '\0')
		return def;
	return strtol(v, NULL, 10);
}

static void maybe_sleep(void) {
	const char *ctl = getenv("SLOWFSYNC_CONTROL");
	if (ctl == NULL || access(ctl, F_OK) != 0)
		return;
	long lo = env_ms("SLOWFSYNC_MIN_MS", 50), hi = env_ms("SLOWFSYNC_MAX_MS", 200);
	if (hi < lo)
		hi = lo;
	struct timespec now;
	clock_gettime(CLOCK_MONOTONIC, &now);
	/* A cheap spread over [lo, hi]: no shared state between threads. */
	unsigned long x = (unsigned long)now.tv_nsec * 2654435761UL;
	long ms = lo + (long)((x >> 7) % (unsigned long)(hi - lo + 1));
	struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&d, &d) != 0)
		;
}

int fsync(int fd) {
	static int (*real)(int);
	if (real == NULL)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fsync");
	maybe_sleep();
	return real(fd);
}

int fdatasync(int fd) {
	static int (*real)(int);
	if (real == NULL)
		real = (int (*)(int))dlsym(RTLD_NEXT, "fdatasync");
	maybe_sleep();
	return real(fd);
}
