/* Shared helpers of the floor programs (the C files beside this one).
 *
 * A floor program does exactly the I/O a store's format requires for one
 * benchmark's work -- the same bytes written, the same syncs, in the same order --
 * and nothing else, then prints one JSON line:
 *   {"floor": NAME, "seconds": S, "ops": O, "bytes": B, "syncs": N, "read_bytes": R, "wchar": W, "rchar": C, ...}
 * ``bytes``/``read_bytes`` are what its write/read calls returned; ``wchar``/``rchar`` are
 * the kernel's own count (/proc/self/io), so a test can hold the program to its claim.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static long long g_bytes, g_read, g_syncs;
static pthread_mutex_t g_count_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((unused)) static void die(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, " (errno %d: %s)\n", errno, strerror(errno));
    exit(2);
}

__attribute__((unused)) static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

__attribute__((unused)) static long long arg_ll(int argc, char **argv, int i) {
    if (i >= argc) die("missing argument %d", i);
    char *end;
    long long v = strtoll(argv[i], &end, 10);
    if (*end) die("argument %d is not an integer: %s", i, argv[i]);
    return v;
}

__attribute__((unused)) static void count_write(long long n) {
    pthread_mutex_lock(&g_count_lock);
    g_bytes += n;
    pthread_mutex_unlock(&g_count_lock);
}

__attribute__((unused)) static int open_rw(const char *path, int extra) {
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | extra, 0644);
    if (fd < 0) die("open %s", path);
    return fd;
}

/* pwrite all of buf at off (counted). */
__attribute__((unused)) static void write_at(int fd, const void *buf, size_t len, off_t off) {
    const char *p = buf;
    size_t left = len;
    while (left) {
        ssize_t n = pwrite(fd, p, left, off);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("pwrite");
        }
        p += n, left -= (size_t)n, off += n;
    }
    count_write((long long)len);
}

/* One range synced by itself: pwritev2(RWF_DSYNC) as engine.fs's write_durable_at
 * does on Linux (elsewhere pwrite + fdatasync); counts one sync. */
__attribute__((unused)) static void write_durable_at(int fd, struct iovec *iov, int cnt, off_t off) {
    size_t len = 0;
    for (int i = 0; i < cnt; i++) len += iov[i].iov_len;
#ifdef RWF_DSYNC
    ssize_t n = pwritev2(fd, iov, cnt, off, RWF_DSYNC);
    if (n < 0) die("pwritev2");
    if ((size_t)n != len) die("short pwritev2");
    count_write((long long)len);
#else
    for (int i = 0; i < cnt; i++) {
        write_at(fd, iov[i].iov_base, iov[i].iov_len, off);
        off += iov[i].iov_len;
    }
    if (fdatasync(fd)) die("fdatasync");
#endif
    pthread_mutex_lock(&g_count_lock);
    g_syncs++;
    pthread_mutex_unlock(&g_count_lock);
}

__attribute__((unused)) static void sync_data(int fd) {
    if (fdatasync(fd)) die("fdatasync");
    pthread_mutex_lock(&g_count_lock);
    g_syncs++;
    pthread_mutex_unlock(&g_count_lock);
}

__attribute__((unused)) static void sync_full(int fd) {
    if (fsync(fd)) die("fsync");
    pthread_mutex_lock(&g_count_lock);
    g_syncs++;
    pthread_mutex_unlock(&g_count_lock);
}

/* Drop the file's pages from the page cache (cold reads); untimed setup. */
__attribute__((unused)) static void drop_cache(const char *path) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) die("open %s", path);
    fdatasync(fd);
    posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
}

static char *random_buffer(size_t len) {
    char *buf = malloc(len ? len : 1);
    if (!buf) die("malloc %zu", len);
    uint64_t x = 0x9E3779B97F4A7C15ull ^ (uint64_t)len;
    for (size_t i = 0; i < len; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        buf[i] = (char)x;
    }
    return buf;
}

__attribute__((unused)) static void proc_io(long long *rchar, long long *wchar) {
    *rchar = *wchar = -1;
    FILE *f = fopen("/proc/self/io", "r");
    if (!f) return;
    char key[64];
    long long v;
    while (fscanf(f, "%63[^:]: %lld\n", key, &v) == 2) {
        if (!strcmp(key, "rchar")) *rchar = v;
        if (!strcmp(key, "wchar")) *wchar = v;
    }
    fclose(f);
}

static long long g_rchar0, g_wchar0;

/* Start of the timed work: setup's I/O is not counted; returns the start time. */
__attribute__((unused)) static double begin_timed(void) {
    pthread_mutex_lock(&g_count_lock);
    g_bytes = g_read = g_syncs = 0;
    pthread_mutex_unlock(&g_count_lock);
    proc_io(&g_rchar0, &g_wchar0);
    return now();
}

/* The JSON line; ``wchar``/``rchar``: the kernel's count since begin_timed(). */
__attribute__((unused)) static void report(const char *name, double seconds, long long ops, const char *extra) {
    long long rchar, wchar;
    proc_io(&rchar, &wchar);
    if (rchar >= 0) rchar -= g_rchar0;
    if (wchar >= 0) wchar -= g_wchar0;
    printf("{\"floor\": \"%s\", \"seconds\": %.6f, \"ops\": %lld, \"bytes\": %lld, \"syncs\": %lld, "
           "\"read_bytes\": %lld, \"wchar\": %lld, \"rchar\": %lld%s%s}\n",
           name, seconds, ops, g_bytes, g_syncs, g_read, wchar, rchar, extra ? ", " : "", extra ? extra : "");
    fflush(stdout);
}

/* The store core's periodic sync driver, as the stores run it: ``periodic_sync()`` every ``periodic_ms``
 * until periodic_stop() (which wakes it at once and joins it). */
static long long periodic_ms;
static void (*periodic_sync)(void);
static pthread_mutex_t periodic_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t periodic_cond = PTHREAD_COND_INITIALIZER;
static int periodic_stopped;

__attribute__((unused)) static void *periodic_syncer(void *arg) {
    (void)arg;
    pthread_mutex_lock(&periodic_lock);
    while (!periodic_stopped) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += (periodic_ms % 1000) * 1000000L;
        ts.tv_sec += periodic_ms / 1000 + ts.tv_nsec / 1000000000L;
        ts.tv_nsec %= 1000000000L;
        while (!periodic_stopped && pthread_cond_timedwait(&periodic_cond, &periodic_lock, &ts) != ETIMEDOUT) {
        }
        if (periodic_stopped) break;
        pthread_mutex_unlock(&periodic_lock);
        periodic_sync();
        pthread_mutex_lock(&periodic_lock);
    }
    pthread_mutex_unlock(&periodic_lock);
    return NULL;
}

__attribute__((unused)) static pthread_t periodic_start(long long ms, void (*sync)(void)) {
    periodic_ms = ms;
    periodic_sync = sync;
    pthread_t thread;
    if (pthread_create(&thread, NULL, periodic_syncer, NULL)) die("pthread_create");
    return thread;
}

__attribute__((unused)) static void periodic_stop(pthread_t thread) {
    pthread_mutex_lock(&periodic_lock);
    periodic_stopped = 1;
    pthread_cond_signal(&periodic_cond);
    pthread_mutex_unlock(&periodic_lock);
    pthread_join(thread, NULL);
}
