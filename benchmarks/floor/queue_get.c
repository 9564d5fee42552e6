/* Floor of the queue's get+confirm (engine.queue reader, libkestrel journal).
 *
 * Reads the writer files PREFIX.0 .. PREFIX.<nfiles-1> front to back in ``chunk``-byte
 * reads (the reader's CHUNK), each file dropped from the page cache first with
 * ``cold`` (setup), and does the reader's checkpoint every ``interval_ms`` and once at
 * the end (close): its reader file (``reader_bytes``: magic, CHECK, READ_HEAD, empty
 * READ_DONE) written to a temporary file, fsynced, renamed over READER, the directory
 * fsynced; the writer files every reader has passed are deleted (one directory fsync).
 * Nothing else: no record is decoded.
 *
 * usage: queue_get PREFIX nfiles chunk reader_bytes interval_ms cold READER
 */
#include <libgen.h>

#include "floor.h"

static int dirfd_;
static const char *reader_path;
static char *buf;
static long long reader_bytes, checkpoints, retired;

static void checkpoint(const char *prefix, long long passed) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s~~%lld", reader_path, checkpoints);
    int fd = open_rw(tmp, O_TRUNC);
    write_at(fd, buf, (size_t)reader_bytes, 0);
    sync_full(fd);
    close(fd);
    if (rename(tmp, reader_path)) die("rename %s", tmp);
    sync_full(dirfd_);
    if (retired < passed) {
        for (; retired < passed; retired++) {
            char path[4200];
            snprintf(path, sizeof path, "%s.%lld", prefix, retired);
            if (unlink(path)) die("unlink %s", path);
        }
        sync_full(dirfd_);
    }
    checkpoints++;
}

int main(int argc, char **argv) {
    if (argc != 8) die("usage: queue_get PREFIX nfiles chunk reader_bytes interval_ms cold READER");
    const char *prefix = argv[1];
    long long nfiles = arg_ll(argc, argv, 2), chunk = arg_ll(argc, argv, 3);
    reader_bytes = arg_ll(argc, argv, 4);
    long long interval_ms = arg_ll(argc, argv, 5), cold = arg_ll(argc, argv, 6);
    reader_path = argv[7];
    if (chunk <= 0 || reader_bytes <= 0 || interval_ms <= 0) die("bad sizes");
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", reader_path);
    dirfd_ = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd_ < 0) die("open directory of %s", reader_path);
    buf = random_buffer((size_t)(chunk > reader_bytes ? chunk : reader_bytes));
    for (long long i = 0; cold && i < nfiles; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s.%lld", prefix, i);
        drop_cache(path);
    }
    double start = begin_timed(), next = start + interval_ms / 1000.0;
    for (long long i = 0; i < nfiles; i++) {
        char path[4200];
        snprintf(path, sizeof path, "%s.%lld", prefix, i);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) die("open %s", path);
        off_t at = 0;
        for (;;) {
            ssize_t n = pread(fd, buf, (size_t)chunk, at);
            if (n < 0) die("pread %s", path);
            if (n == 0) break;
            at += n;
            pthread_mutex_lock(&g_count_lock);
            g_read += n;
            pthread_mutex_unlock(&g_count_lock);
            if (now() >= next) {
                checkpoint(prefix, i);
                next = now() + interval_ms / 1000.0;
            }
        }
        close(fd);
    }
    checkpoint(prefix, nfiles - 1);  /* close; the newest file stays (the writer's) */
    double seconds = now() - start;
    char extra[64];
    snprintf(extra, sizeof extra, "\"checkpoints\": %lld", checkpoints);
    report("queue_get", seconds, 0, extra);
    return 0;
}
