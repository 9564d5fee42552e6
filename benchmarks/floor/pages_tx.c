/* Floor of the page store's durable transactions (engine.pages, JRNL journal).
 *
 * For each transaction: its journal bytes (``tx_bytes``: header, one MODIFY op per
 * page with the before and the after image, COMPLETE; computed by the benchmark from
 * engine.pages.codec) as ONE range written and synced by itself (pwritev2 RWF_DSYNC),
 * at the journal's end; the first transaction after a reset sits at offset 20 and
 * goes out in the same range as the 20-byte file header (engine.pages.journal).
 * The store's checkpoint policy (journal >= ckpt_bytes and (>= ckpt_max or dirty
 * pages * page_size * 8 <= journal)) decides when a checkpoint runs, as the store
 * does it: store header, the dirty pages (one write per run of adjacent pages), their
 * checksums in the sums file, store header again, fdatasync store, fdatasync sums,
 * one JRNL_COMPLETE flag byte per transaction, the zeroed header + wipe of the first
 * transaction (``wipe_bytes``), and with ``final`` a last explicit checkpoint whose
 * journal reset is synced (PageStore.checkpoint()).  Nothing else: no checksums are
 * computed, no pages copied.
 *
 * usage: pages_tx JOURNAL STORE SUMS page_size pages_per_tx page_cycle tx_count
 *        millis tx_bytes ckpt_bytes ckpt_max final flags_off store_header sums_header
 *        sum_bytes wipe_bytes start_tx
 * tx_count transactions (0: as many as fit in ``millis``); ``start_tx``: the index of
 * the first one (a run continuing an earlier one: the journal then holds the
 * transactions since the last checkpoint, as it would for the store).
 */
#include "floor.h"

static long long ps, per_tx, cycle, tx_bytes, ckpt_bytes, ckpt_max, flags_off, store_header, sums_header,
    sum_bytes, wipe_bytes;
static int jfd, sfd, cfd;
static char *pages_buf, *tx_buf, *zero;
static unsigned char *dirty;
static long long ndirty, end, unapplied_first_tx, checkpoints;

static void mark(long long tx) {
    for (long long k = 0; k < per_tx; k++) {
        long long page = (tx * per_tx + k) % cycle;  /* 0-based; store page id = page + 1 */
        if (!dirty[page]) dirty[page] = 1, ndirty++;
    }
}

static void checkpoint(long long next_tx, int final) {
    write_at(sfd, zero, (size_t)store_header, 0);
    for (long long p = 0; p < cycle;) {
        if (!dirty[p]) { p++; continue; }
        long long q = p;
        while (q < cycle && dirty[q]) q++;
        write_at(sfd, pages_buf, (size_t)((q - p) * ps), (off_t)((p + 1) * ps));
        write_at(cfd, zero, (size_t)((q - p) * sum_bytes), (off_t)(sums_header + p * sum_bytes));
        p = q;
    }
    write_at(sfd, zero, (size_t)store_header, 0);
    sync_data(sfd);
    sync_data(cfd);
    for (long long t = unapplied_first_tx; t < next_tx; t++)
        write_at(jfd, "\1", 1, (off_t)(20 + (t - unapplied_first_tx) * tx_bytes + flags_off));
    write_at(jfd, zero, (size_t)wipe_bytes, 0);
    if (final) sync_data(jfd);
    memset(dirty, 0, (size_t)cycle);
    ndirty = 0;
    end = 20;
    unapplied_first_tx = next_tx;
    checkpoints++;
}

int main(int argc, char **argv) {
    if (argc != 19) die("usage: pages_tx JOURNAL STORE SUMS page_size pages_per_tx page_cycle tx_count millis "
                        "tx_bytes ckpt_bytes ckpt_max final flags_off store_header sums_header sum_bytes "
                        "wipe_bytes start_tx");
    ps = arg_ll(argc, argv, 4), per_tx = arg_ll(argc, argv, 5), cycle = arg_ll(argc, argv, 6);
    long long tx_count = arg_ll(argc, argv, 7), millis = arg_ll(argc, argv, 8);
    tx_bytes = arg_ll(argc, argv, 9), ckpt_bytes = arg_ll(argc, argv, 10), ckpt_max = arg_ll(argc, argv, 11);
    int final = (int)arg_ll(argc, argv, 12);
    flags_off = arg_ll(argc, argv, 13), store_header = arg_ll(argc, argv, 14);
    sums_header = arg_ll(argc, argv, 15), sum_bytes = arg_ll(argc, argv, 16), wipe_bytes = arg_ll(argc, argv, 17);
    long long start_tx = arg_ll(argc, argv, 18);
    if (ps <= 0 || per_tx <= 0 || cycle < per_tx || tx_bytes <= 0 || wipe_bytes < 20) die("bad sizes");
    jfd = open_rw(argv[1], 0), sfd = open_rw(argv[2], 0), cfd = open_rw(argv[3], 0);
    pages_buf = random_buffer((size_t)(cycle * ps));
    tx_buf = random_buffer((size_t)tx_bytes);
    zero = calloc(1, (size_t)(wipe_bytes > store_header ? wipe_bytes : store_header) + (size_t)(cycle * sum_bytes));
    dirty = calloc(1, (size_t)cycle);
    if (!zero || !dirty) die("calloc");
    /* Setup (untimed): the files have their blocks, as the store's do once warm. */
    struct stat st;
    long long store_size = (cycle + 1) * ps;
    if (fstat(sfd, &st) || st.st_size < store_size) {
        write_at(sfd, pages_buf, (size_t)(cycle * ps), (off_t)ps);
        write_at(cfd, zero, (size_t)(sums_header + cycle * sum_bytes), 0);
        sync_full(sfd), sync_full(cfd);
    }
    long long jsize = 20 + (ckpt_max / tx_bytes + 2) * tx_bytes;
    if (fstat(jfd, &st) || st.st_size < jsize) {
        char *blank = calloc(1, 1 << 20);
        for (long long at = st.st_size; at < jsize; at += 1 << 20) write_at(jfd, blank, 1 << 20, (off_t)at);
        sync_full(jfd);
        free(blank);
    }
    /* A continued run: the journal holds the transactions since the last checkpoint. */
    long long since = start_tx;
    for (long long t = 0; t < start_tx; t++) {  /* replay the policy (no I/O) */
        end = end ? end : 20;
        end += tx_bytes;
        mark(t);
        if (end >= ckpt_bytes && (end >= ckpt_max || ndirty * ps * 8 <= end)) {
            memset(dirty, 0, (size_t)cycle), ndirty = 0, end = 20, since = t + 1;
        }
    }
    if (!end) end = 20;
    unapplied_first_tx = start_tx ? since : 0;
    char header[20] = "JRNL";
    double start = begin_timed(), deadline = start + millis / 1000.0;
    long long tx = start_tx, done = 0;
    while (tx_count ? done < tx_count : now() < deadline) {
        struct iovec iov[2];
        int cnt = 0;
        off_t at = (off_t)end;
        if (end == 20) iov[cnt].iov_base = header, iov[cnt++].iov_len = 20, at = 0;
        iov[cnt].iov_base = tx_buf, iov[cnt++].iov_len = (size_t)tx_bytes;
        write_durable_at(jfd, iov, cnt, at);
        end += tx_bytes;
        mark(tx);
        tx++, done++;
        if (end >= ckpt_bytes && (end >= ckpt_max || ndirty * ps * 8 <= end)) checkpoint(tx, 0);
    }
    if (final && end > 20) checkpoint(tx, 1);
    double seconds = now() - start;
    char extra[128];
    snprintf(extra, sizeof extra, "\"checkpoints\": %lld, \"next_tx\": %lld", checkpoints, tx);
    report("pages_tx", seconds, done, extra);
    return 0;
}
