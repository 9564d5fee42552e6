/* Floor of the stream journal with many clients (engine.streams, journald format).
 *
 * ``clients`` threads each write ``streams_each`` streams of ``records`` records; a
 * stream's first record is preceded by its INFO record (``info_bytes``), every record
 * is ``record_bytes`` on disk (header + data + check code).  Records join one pending
 * transaction; past ``spill`` bytes its whole pages are written out early (unsynced),
 * as the store does.  Closing a stream waits on a group commit: the leader (after
 * ``delay_us`` when other streams are still open, the original server's delayed sync)
 * writes the pending transaction padded to the page end plus one zero page in one
 * write, the copy of one record (``echo_bytes``) in the file's last pages, then one
 * fdatasync for every stream in it.  The journal (``size`` bytes) is preallocated
 * (setup) and not wrapped (the benchmark keeps its volume below ``size``).  Nothing
 * else: no record is framed or checksummed, no socket is read.
 *
 * usage: streams_write PATH clients streams_each records record_bytes info_bytes page size delay_us echo_bytes spill
 */
#include "floor.h"

static int fd;
static long long page, size, delay_us, echo_bytes, spill, record_bytes, info_bytes;
static char *buf;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;   /* the pending transaction */
static pthread_mutex_t io_lock = PTHREAD_MUTEX_INITIALIZER; /* the file */
static long long pending, spilled, txn_pos, active, transactions;
/* The group commit (engine.fs.GroupCommit). */
static pthread_mutex_t gc_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gc_cond = PTHREAD_COND_INITIALIZER;
static long long issued, synced_ticket;
static int syncing;

static long long page_ceil(long long n) { return (n + page - 1) / page * page; }

static void write_span(long long len, long long at) {
    while (len > 0) {  /* from the random buffer, in pieces of at most its size */
        long long n = len < 4 * 1024 * 1024 ? len : 4 * 1024 * 1024;
        write_at(fd, buf, (size_t)n, (off_t)at);
        len -= n, at += n;
    }
}

static void emit(long long bytes) {  /* caller holds lock */
    pending += bytes;
    if (pending >= spill && pthread_mutex_trylock(&io_lock) == 0) {
        long long cut = pending / page * page;
        write_span(cut, txn_pos + spilled);
        pending -= cut, spilled += cut;
        pthread_mutex_unlock(&io_lock);
    }
}

static void commit(void) {
    pthread_mutex_lock(&lock);
    int others = active > 0;
    pthread_mutex_unlock(&lock);
    if (delay_us > 0 && others) {
        struct timespec ts = {delay_us / 1000000, (delay_us % 1000000) * 1000};
        nanosleep(&ts, NULL);
    }
    pthread_mutex_lock(&lock);
    if (!pending && !spilled) {
        pthread_mutex_unlock(&lock);
        return;
    }
    long long start = txn_pos + spilled, len = page_ceil(pending);
    txn_pos = start + len;
    spilled = pending = 0;
    pthread_mutex_lock(&io_lock);
    pthread_mutex_unlock(&lock);
    if (start + len + page > size) die("journal full: the benchmark must keep its volume below the size");
    write_span(len + page, start);  /* transaction, padding, zero page: one write */
    long long at = size - page_ceil(echo_bytes);
    if (at >= start + len + page) write_span(echo_bytes, at);
    sync_data(fd);
    transactions++;
    pthread_mutex_unlock(&io_lock);
}

static void gc_wait(long long ticket) {
    pthread_mutex_lock(&gc_lock);
    for (;;) {
        if (synced_ticket >= ticket) {
            pthread_mutex_unlock(&gc_lock);
            return;
        }
        if (!syncing) break;
        pthread_cond_wait(&gc_cond, &gc_lock);
    }
    syncing = 1;
    long long target = issued;
    pthread_mutex_unlock(&gc_lock);
    commit();
    pthread_mutex_lock(&gc_lock);
    syncing = 0;
    if (target > synced_ticket) synced_ticket = target;
    pthread_cond_broadcast(&gc_cond);
    pthread_mutex_unlock(&gc_lock);
}

static long long streams_each, records;

static void *client(void *arg) {
    (void)arg;
    for (long long s = 0; s < streams_each; s++) {
        pthread_mutex_lock(&lock);
        active++;
        pthread_mutex_unlock(&lock);
        for (long long r = 0; r < records; r++) {
            pthread_mutex_lock(&lock);
            emit((r == 0 ? info_bytes : 0) + record_bytes);
            long long ticket = 0;
            if (r == records - 1) {  /* the last record (DATA|EOS) closes the stream */
                active--;
                pthread_mutex_lock(&gc_lock);
                ticket = ++issued;
                pthread_mutex_unlock(&gc_lock);
            }
            pthread_mutex_unlock(&lock);
            if (ticket) gc_wait(ticket);
        }
    }
    return NULL;
}

int main(int argc, char **argv) {
    if (argc != 12)
        die("usage: streams_write PATH clients streams_each records record_bytes info_bytes page size delay_us "
            "echo_bytes spill");
    long long clients = arg_ll(argc, argv, 2);
    streams_each = arg_ll(argc, argv, 3), records = arg_ll(argc, argv, 4);
    record_bytes = arg_ll(argc, argv, 5), info_bytes = arg_ll(argc, argv, 6), page = arg_ll(argc, argv, 7);
    size = arg_ll(argc, argv, 8), delay_us = arg_ll(argc, argv, 9), echo_bytes = arg_ll(argc, argv, 10);
    spill = arg_ll(argc, argv, 11);
    if (clients <= 0 || records <= 0 || page <= 0 || size < 4 * page || clients > 1024) die("bad sizes");
    buf = random_buffer(4 * 1024 * 1024);
    fd = open_rw(argv[1], 0);
    struct stat st;
    if (fstat(fd, &st) || st.st_size < size) {  /* setup: preallocated, as the store creates it */
        char *zero = calloc(1, 1 << 20);
        for (long long at = 0; at < size; at += 1 << 20)
            write_at(fd, zero, (size_t)(size - at < (1 << 20) ? size - at : (1 << 20)), (off_t)at);
        sync_full(fd);
        free(zero);
    }
    txn_pos = page;  /* after the header page */
    pthread_t threads[1024];
    double start = begin_timed();
    for (long long k = 0; k < clients; k++)
        if (pthread_create(&threads[k], NULL, client, NULL)) die("pthread_create");
    for (long long k = 0; k < clients; k++) pthread_join(threads[k], NULL);
    double seconds = now() - start;
    char extra[64];
    snprintf(extra, sizeof extra, "\"transactions\": %lld", transactions);
    report("streams_write", seconds, clients * streams_each, extra);
    return 0;
}
