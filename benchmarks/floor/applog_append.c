/* Floor of the append log's ``append_many`` with a sync period (engine.applog).
 *
 * A segment is three files (LOG, .crc, .idx), each created with its header
 * (``header_bytes``, setup).  Each batch of ``batch`` records goes out as the store
 * writes it: the framed records (``record_bytes`` each: frame + data) in one write at
 * the LOG's end, their checksums (``crc_bytes`` each) in one write to .crc, their
 * index entries (``idx_bytes`` each) in one write to .idx.  A second thread does the
 * store core's sync driver every ``period_ms``: fdatasync LOG, .crc, .idx when something
 * was written since the last sync.  The timed work ends with close: one fdatasync of
 * each file.  Nothing else: no record is framed or checksummed.  (The benchmark keeps
 * the volume inside one segment.)
 *
 * usage: applog_append LOG CRC IDX record_bytes batch batches period_ms crc_bytes idx_bytes header_bytes
 */
#include "floor.h"

static int fds[3];
static long long ends[3], synced[3];
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;

static void sync_files(void) {
    pthread_mutex_lock(&lock);
    long long at[3] = {ends[0], ends[1], ends[2]};
    pthread_mutex_unlock(&lock);
    if (at[0] == synced[0] && at[1] == synced[1] && at[2] == synced[2]) return;
    for (int i = 0; i < 3; i++) sync_data(fds[i]), synced[i] = at[i];
}

int main(int argc, char **argv) {
    if (argc != 11)
        die("usage: applog_append LOG CRC IDX record_bytes batch batches period_ms crc_bytes idx_bytes header_bytes");
    long long record = arg_ll(argc, argv, 4), batch = arg_ll(argc, argv, 5), batches = arg_ll(argc, argv, 6);
    long long period_ms = arg_ll(argc, argv, 7);
    long long per[3] = {record, arg_ll(argc, argv, 8), arg_ll(argc, argv, 9)};
    long long header = arg_ll(argc, argv, 10);
    if (record <= 0 || batch <= 0 || period_ms <= 0) die("bad sizes");
    char *buf = random_buffer((size_t)(batch * record + header));
    for (int i = 0; i < 3; i++) {
        fds[i] = open_rw(argv[1 + i], O_TRUNC);
        write_at(fds[i], buf, (size_t)header, 0);
        sync_full(fds[i]);
        ends[i] = synced[i] = header;
    }
    double start = begin_timed();
    pthread_t thread = periodic_start(period_ms, sync_files);
    for (long long b = 0; b < batches; b++) {
        pthread_mutex_lock(&lock);
        for (int i = 0; i < 3; i++) {
            write_at(fds[i], buf, (size_t)(batch * per[i]), (off_t)ends[i]);
            ends[i] += batch * per[i];
        }
        pthread_mutex_unlock(&lock);
    }
    periodic_stop(thread);
    for (int i = 0; i < 3; i++) sync_data(fds[i]);  /* close */
    double seconds = now() - start;
    report("applog_append", seconds, batch * batches, NULL);
    return 0;
}
