/* Floor of the queue's buffered puts (engine.queue, libkestrel journal, sync period).
 *
 * The writer file starts with its 13-byte header (setup).  Each put stages one PUT
 * record of ``record_bytes`` (header + data: engine.queue.codec.put_size) in a
 * buffer; once ``buffer_limit`` bytes are staged they go out as one write followed by
 * their 9-byte CHECK record (``check_bytes``), at the file's end.  A second thread
 * does what the store core's sync driver does every ``period_ms``: write what is staged
 * (with its CHECK), then fdatasync the file, when something was written since the
 * last sync.  The timed work ends, as the benchmark's does, with close: the staged
 * records written and one fdatasync.  A record that would take the file past
 * ``journal_size`` starts a new file first, as the store rotates: the staged records
 * written, the old file fsynced, the new one created (its header written, fsync, the
 * directory fsynced).  With a shared state record (``state_bytes`` > 0: the
 * producers' positions, engine.queue.shared), each write is followed by the record
 * rewritten at offset 0 of PATH.state, and each sync by ``synced_bytes`` at
 * ``synced_at``.  Nothing else: no record is encoded.
 *
 * usage: queue_put PATH record_bytes count buffer_limit check_bytes header_bytes period_ms journal_size
 *        [state_bytes synced_at synced_bytes]
 * (the files are PATH.0, PATH.1, ... in PATH's directory)
 */
#include <libgen.h>
#include "floor.h"

static int fd, dirfd_, state_fd = -1;
static long long state_bytes, synced_at, synced_bytes;
static const char *base;
static long long segment, header;
static char *buf;
static long long staged, end, check_bytes, synced_end;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void flush_locked(void) {
    if (!staged) return;
    write_at(fd, buf, (size_t)(staged + check_bytes), (off_t)end);
    end += staged + check_bytes;
    staged = 0;
    if (state_fd >= 0) write_at(state_fd, buf, (size_t)state_bytes, 0);
}

/* A new writer file: created, its header written and synced, the directory synced. */
static void create_segment(void) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%lld", base, segment++);
    unlink(path);
    fd = open_rw(path, O_EXCL);
    write_at(fd, buf, (size_t)header, 0);
    sync_full(fd);
    sync_full(dirfd_);
    end = synced_end = header;
}

static pthread_mutex_t sync_lock = PTHREAD_MUTEX_INITIALIZER;

/* The store's _sync_journal: flush under the lock, fdatasync under the sync lock
 * (a rotated-out file was fsynced whole by the rotation: skipped). */
static void sync_file(void) {
    pthread_mutex_lock(&lock);
    flush_locked();
    long long at = end, seg = segment;
    int f = fd;
    pthread_mutex_unlock(&lock);
    pthread_mutex_lock(&sync_lock);
    if (seg == segment && at > synced_end) {
        sync_data(f);
        synced_end = at;
        if (state_fd >= 0) write_at(state_fd, buf, (size_t)synced_bytes, (off_t)synced_at);
    }
    pthread_mutex_unlock(&sync_lock);
}

int main(int argc, char **argv) {
    if (argc != 9 && argc != 12)
        die("usage: queue_put PATH record_bytes count buffer_limit check_bytes header_bytes period_ms journal_size");
    long long record = arg_ll(argc, argv, 2), count = arg_ll(argc, argv, 3), limit = arg_ll(argc, argv, 4);
    check_bytes = arg_ll(argc, argv, 5);
    header = arg_ll(argc, argv, 6);
    long long period_ms = arg_ll(argc, argv, 7);
    long long journal_size = arg_ll(argc, argv, 8);
    if (argc == 12) {
        state_bytes = arg_ll(argc, argv, 9), synced_at = arg_ll(argc, argv, 10), synced_bytes = arg_ll(argc, argv, 11);
    }
    if (record <= 0 || limit <= 0 || period_ms <= 0 || journal_size <= header) die("bad sizes");
    base = argv[1];
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", base);
    dirfd_ = open(dirname(dir), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dirfd_ < 0) die("open directory of %s", base);
    long long cap = limit + record + check_bytes;
    buf = random_buffer((size_t)cap);
    char *item = random_buffer((size_t)record);
    if (state_bytes > 0) {
        char state[4200];
        snprintf(state, sizeof state, "%s.state", base);
        state_fd = open_rw(state, 0);
        write_at(state_fd, buf, (size_t)(synced_at + synced_bytes), 0);
    }
    create_segment();  /* setup: the queue's open */
    double start = begin_timed();
    pthread_t thread = periodic_start(period_ms, sync_file);
    for (long long i = 0; i < count; i++) {
        pthread_mutex_lock(&lock);
        if (end + staged + record > journal_size && end + staged > header) {
            flush_locked();
            pthread_mutex_lock(&sync_lock);
            sync_full(fd);  /* the old file complete and durable before the next exists */
            close(fd);
            create_segment();
            pthread_mutex_unlock(&sync_lock);
        }
        memcpy(buf + staged, item, (size_t)record);  /* the staged record */
        staged += record;
        if (staged >= limit) flush_locked();
        pthread_mutex_unlock(&lock);
    }
    periodic_stop(thread);
    sync_file();  /* close */
    double seconds = now() - start;
    report("queue_put", seconds, count, NULL);
    return 0;
}
