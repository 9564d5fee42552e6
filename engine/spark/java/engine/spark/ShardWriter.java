package engine.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.zip.CRC32;

/**
 * One task's shard of an engine-log sink dataset: an append log under
 * {@code DATASET/job-<id>/<shard>/}, written byte for byte as engine.applog's
 * {@code SegmentWriter} writes it (engine.spark.sink.ShardWriter is the Python twin; the
 * parity test compares the files).
 *
 * <p>Layouts (engine/applog/codec.py, little-endian): file header {@code 3s magic, u8
 * version 1, u32 flags 0, i64 ttl_ns} (16 bytes; the .crc file's i64 is 0); record {@code u32
 * size, u32 flags, i64 time_ns, data}; .crc entry {@code u32 CRC-32 of header + data}; index
 * entry {@code i64 time_ns, u64 index, i64 offset}.  A record that would push the log past
 * {@code segmentBytes} starts a new segment, unless the segment is empty.
 *
 * <p>Order, as the store's: a segment's three files are created durably (header, fsync,
 * fsync directory) log, then .crc, then index; pending bytes are written log, then
 * checksums, then index entries; a segment is sealed (fdatasync log, .crc, index) before the
 * next is created and at the end; {@link #finish} then fsyncs the shard's directory.
 */
final class ShardWriter {
    static final int HEADER_SIZE = 16;
    static final int RECORD_HEADER_SIZE = 16;
    static final int ENTRY_SIZE = 24;
    static final int CRC_SIZE = 4;
    static final long MAX_FLAGS = 0xFFFFFFFFL;
    /** Encoded log bytes kept before they are written (engine.spark.sink.SINK_BUFFER_BYTES). */
    static final int BUFFER_BYTES = 1 << 20;

    final String dataset;
    final String jobId;
    final String shard;
    final Path dir;
    private final long segmentBytes;
    private final long ttlNs;
    private long nextIndex;
    private long lastTime = Long.MIN_VALUE;
    private long bytes;
    private boolean finished;
    private int segments;
    // The open segment (null: none yet, or sealed).
    private FileChannel log;
    private FileChannel crc;
    private FileChannel idx;
    private long base;
    private long logAt;  // the log file's size at the last flush
    private final Buf pendLog = new Buf();
    private final Buf pendCrc = new Buf();
    private final Buf pendIdx = new Buf();
    private final CRC32 crc32 = new CRC32();
    private final ByteBuffer head = ByteBuffer.allocate(RECORD_HEADER_SIZE).order(ByteOrder.LITTLE_ENDIAN);

    ShardWriter(String dataset, String jobId, String shard, long segmentBytes, long ttlNs) {
        this.dataset = dataset;
        this.jobId = jobId;
        this.shard = shard;
        this.dir = Paths.get(dataset, SinkDataset.JOB_PREFIX + jobId, shard);
        this.segmentBytes = segmentBytes;
        this.ttlNs = ttlNs;
        SinkDataset.makeDirs(dir);
    }

    /** A growable little-endian byte buffer. */
    static final class Buf {
        byte[] a = new byte[256];
        int n;

        void ensure(int more) {
            if (n + more > a.length) {
                a = java.util.Arrays.copyOf(a, Math.max(a.length * 2, n + more));
            }
        }

        void put(byte[] b, int off, int len) {
            ensure(len);
            System.arraycopy(b, off, a, n, len);
            n += len;
        }

        void i32(long v) {
            ensure(4);
            for (int i = 0; i < 4; i++) {
                a[n++] = (byte) (v >>> (8 * i));
            }
        }

        void i64(long v) {
            ensure(8);
            for (int i = 0; i < 8; i++) {
                a[n++] = (byte) (v >>> (8 * i));
            }
        }
    }

    static byte[] fileHeader(String magic, long ttl) {
        ByteBuffer b = ByteBuffer.allocate(HEADER_SIZE).order(ByteOrder.LITTLE_ENDIAN);
        b.put(magic.getBytes(java.nio.charset.StandardCharsets.US_ASCII)).put((byte) 1).putInt(0).putLong(ttl);
        return b.array();
    }

    static String segmentName(long base, String ext) {
        return String.format("%020d%s", base, ext);
    }

    long records() {
        return nextIndex;
    }

    long bytes() {
        return bytes;
    }

    /** Append one record; {@code timeNs} null: the clock (never before the previous record). */
    void add(byte[] data, long flags, Long timeNs) {
        if (finished) {
            throw new ConfigException(shard + ": the shard is finished");
        }
        if (data == null) {
            throw new ConfigException(shard + ": record data must not be null");
        }
        long t;
        if (timeNs == null) {
            java.time.Instant now = java.time.Instant.now();
            t = Math.max(now.getEpochSecond() * 1_000_000_000L + now.getNano(), lastTime);
        } else {
            t = timeNs;
            if (t < lastTime) {
                throw new ConfigException(shard + ": record times go backwards; an append log needs them in order "
                    + "(sort each partition first: df.sortWithinPartitions('time'))");
            }
        }
        if (flags < 0 || flags > MAX_FLAGS) {
            throw new ConfigException(shard + ": flags must fit in an unsigned 32-bit integer");
        }
        long pos = logAt + pendLog.n;
        if (log == null) {
            roll();
            pos = logAt;
        } else if (pos + RECORD_HEADER_SIZE + data.length > segmentBytes && nextIndex > base) {
            roll();  // the record does not fit and the segment has one: a new segment
            pos = logAt;
        }
        head.clear();
        head.putInt(data.length).putInt((int) flags).putLong(t);
        byte[] h = head.array();
        pendLog.put(h, 0, RECORD_HEADER_SIZE);
        pendLog.put(data, 0, data.length);
        crc32.reset();
        crc32.update(h, 0, RECORD_HEADER_SIZE);
        crc32.update(data, 0, data.length);
        pendCrc.i32(crc32.getValue());
        pendIdx.i64(t);
        pendIdx.i64(nextIndex);
        pendIdx.i64(pos);
        nextIndex++;
        lastTime = t;
        bytes += RECORD_HEADER_SIZE + data.length;
        if (pendLog.n >= BUFFER_BYTES) {
            flush();
        }
    }

    private static FileChannel create(Path p, byte[] header) throws IOException {
        FileChannel ch = FileChannel.open(p, StandardOpenOption.CREATE_NEW, StandardOpenOption.READ,
            StandardOpenOption.WRITE);
        try {
            writeFully(ch, header, header.length, 0);
            ch.force(true);
            SinkDataset.fsyncDir(p.getParent());
        } catch (IOException | RuntimeException e) {
            ch.close();
            throw e;
        }
        return ch;
    }

    private static void writeFully(FileChannel ch, byte[] a, int n, long at) throws IOException {
        ByteBuffer b = ByteBuffer.wrap(a, 0, n);
        while (b.hasRemaining()) {
            at += ch.write(b, at);
        }
    }

    /** Seal the open segment and create the next one at {@code nextIndex}. */
    private void roll() {
        closeSegment();
        try {
            base = nextIndex;
            log = create(dir.resolve(segmentName(base, ".log")), fileHeader("LOG", ttlNs));
            crc = create(dir.resolve(segmentName(base, ".crc")), fileHeader("CRC", 0));
            idx = create(dir.resolve(segmentName(base, ".idx")), fileHeader("IDX", ttlNs));
        } catch (IOException e) {
            throw new UncheckedIOException(dir + ": cannot create the segment " + segmentName(base, ".log"), e);
        }
        logAt = HEADER_SIZE;
        segments++;
    }

    /** Write the pending bytes: log, then checksums, then index entries. */
    private void flush() {
        if (pendLog.n == 0) {
            return;
        }
        try {
            writeFully(log, pendLog.a, pendLog.n, logAt);
            writeFully(crc, pendCrc.a, pendCrc.n, crc.size());
            writeFully(idx, pendIdx.a, pendIdx.n, idx.size());
        } catch (IOException e) {
            throw new UncheckedIOException(dir + ": cannot write the shard", e);
        }
        logAt += pendLog.n;
        pendLog.n = 0;
        pendCrc.n = 0;
        pendIdx.n = 0;
    }

    private void closeSegment() {
        if (log == null) {
            return;
        }
        flush();
        try {
            log.force(false);
            crc.force(false);
            idx.force(false);
        } catch (IOException e) {
            throw new UncheckedIOException(dir + ": cannot sync the shard", e);
        } finally {
            closeFiles();
        }
    }

    private void closeFiles() {
        for (FileChannel ch : new FileChannel[] {log, crc, idx}) {
            if (ch != null) {
                try {
                    ch.close();
                } catch (IOException ignored) {
                    // closing after a failure: the failure is what is reported
                }
            }
        }
        log = null;
        crc = null;
        idx = null;
    }

    /** Make the shard durable and describe it for the driver's commit. */
    LogSink.ShardCommit finish() {
        if (!finished) {
            if (segments == 0) {
                roll();  // an empty task still leaves a valid (empty) log
            }
            closeSegment();
            SinkDataset.fsyncDir(dir);
            finished = true;
        }
        return new LogSink.ShardCommit(jobId, shard, nextIndex, bytes);
    }

    /** Remove this task's shard, and its job's directory when no other shard is in it. */
    void abort() {
        closeFiles();
        SinkDataset.removeTree(dir);
        Path job = dir.getParent();
        try {
            Files.delete(job);
        } catch (IOException | UncheckedIOException ignored) {
            // not empty (another task's shard) or gone: the job's abort or cleanup removes it
        }
    }

    /**
     * For the parity tests, without Spark: {@code ShardWriter DATASET JOB SHARD SEGMENT_BYTES TTL_NS}
     * writes the records of its standard input (lines {@code time_ns|- flags hex(data)}) as that
     * shard and prints {@code records bytes}, or {@code ERROR ConfigError: <message>}.
     */
    public static void main(String[] args) throws java.io.IOException {
        ShardWriter w = new ShardWriter(args[0], args[1], args[2], Long.parseLong(args[3]), Long.parseLong(args[4]));
        java.io.BufferedReader in = new java.io.BufferedReader(
            new java.io.InputStreamReader(System.in, java.nio.charset.StandardCharsets.US_ASCII));
        try {
            for (String line = in.readLine(); line != null; line = in.readLine()) {
                String[] f = line.split(" ", -1);
                byte[] data = new byte[f[2].length() / 2];
                for (int i = 0; i < data.length; i++) {
                    data[i] = (byte) Integer.parseInt(f[2].substring(2 * i, 2 * i + 2), 16);
                }
                w.add(data, Long.parseLong(f[1]), f[0].equals("-") ? null : Long.valueOf(f[0]));
            }
            LogSink.ShardCommit c = w.finish();
            System.out.println(c.records + " " + c.bytes);
        } catch (ConfigException e) {
            w.abort();
            System.out.println("ERROR ConfigError: " + e.getMessage());
        }
    }
}
