package engine.spark;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.zip.CRC32;

/**
 * One task's staged file of the engine-queue sink: the JVM twin of
 * {@code engine.spark.queuesink.encode_stage} (tested byte for byte).  The queue journal's
 * writer-file format: the writer magic, an empty CHECK, then runs of PUT records (ids 1, 2,
 * ... within the file, the staging time as add time, the row's expiry in ms or none), each
 * followed by the CHECK (crc32, length) of its bytes; a run ends after {@link #RUN_ROWS} rows
 * or once it holds {@link #RUN_BYTES}.  {@link #finish} fsyncs the file and its directory.
 * The driver's commit puts the runs into the queue through Python's producer (see
 * docs/pipeline.md, "The queue sink").
 */
final class QueueStage {
    static final int RUN_ROWS = 1024;
    static final int RUN_BYTES = 1 << 20;
    /** engine.queue.codec.LARGEST_ITEM: what the commit's producer takes. */
    static final int LARGEST_ITEM = 16 * 1024 * 1024;
    private static final byte[] HEADER = {0x27, 0x64, 0x26, 0x03, 0x22, 0, 0, 0, 0, 0, 0, 0, 0};

    private final Path path;
    private final long addTimeMs;
    private final FileChannel channel;
    private ByteBuffer run = ByteBuffer.allocate(64 * 1024).order(ByteOrder.LITTLE_ENDIAN);
    private int runRows;
    private long rows;

    QueueStage(Path path, long addTimeMs) {
        this.path = path;
        this.addTimeMs = addTimeMs;
        SinkDataset.makeDirs(path.getParent());
        try {
            this.channel = FileChannel.open(path, StandardOpenOption.CREATE_NEW, StandardOpenOption.WRITE);
            write(ByteBuffer.wrap(HEADER));
        } catch (IOException e) {
            throw SinkDataset.io(path, "cannot create the staged file", e);
        }
    }

    /** Stage one row: {@code expireMs} null for an item that never expires. */
    void add(byte[] data, Long expireMs) {
        if (data == null) {
            throw new ConfigException("engine-queue sink: data must not be null");
        }
        if (data.length > LARGEST_ITEM) {
            throw new ConfigException("engine-queue sink: item of " + data.length + " bytes exceeds max_item_size "
                + LARGEST_ITEM);
        }
        int size = (expireMs == null ? 25 : 33) + data.length;
        if (run.remaining() < size) {
            ByteBuffer bigger = ByteBuffer.allocate(Math.max(run.capacity() * 2, run.position() + size))
                .order(ByteOrder.LITTLE_ENDIAN);
            run.flip();
            bigger.put(run);
            run = bigger;
        }
        rows++;
        run.put((byte) (expireMs == null ? 0x86 : 0x88)).putInt(data.length).putInt(0).putLong(rows)
            .putLong(addTimeMs);
        if (expireMs != null) {
            run.putLong(expireMs);
        }
        run.put(data);
        runRows++;
        if (runRows >= RUN_ROWS || run.position() >= RUN_BYTES) {
            closeRun();
        }
    }

    private void closeRun() {
        if (runRows == 0) {
            return;
        }
        CRC32 crc = new CRC32();
        crc.update(run.array(), 0, run.position());
        ByteBuffer check = ByteBuffer.allocate(9).order(ByteOrder.LITTLE_ENDIAN);
        check.put((byte) 0x22).putInt((int) crc.getValue()).putInt(run.position()).flip();
        run.flip();
        try {
            write(run);
            write(check);
        } catch (IOException e) {
            throw SinkDataset.io(path, "cannot write the staged file", e);
        }
        run.clear();
        runRows = 0;
    }

    private void write(ByteBuffer b) throws IOException {
        while (b.hasRemaining()) {
            channel.write(b);
        }
    }

    /** The file's name (what the commit is given). */
    String name() {
        return path.getFileName().toString();
    }

    long rows() {
        return rows;
    }

    /** The last run, then the file and its directory durable (before the task reports it). */
    void finish() {
        closeRun();
        try {
            channel.force(true);
            channel.close();
        } catch (IOException e) {
            throw SinkDataset.io(path, "cannot fsync the staged file", e);
        }
        SinkDataset.fsyncDir(path.getParent());
    }

    /** Remove the file (a failed task). */
    void abort() {
        try {
            channel.close();
            Files.deleteIfExists(path);
        } catch (IOException e) {
            throw SinkDataset.io(path, "cannot delete the staged file", e);
        }
    }

    /**
     * For the parity tests: {@code QueueStage FILE ADD_TIME_MS} stages the rows of standard
     * input, one per line, {@code EXPIRE_MS|- HEX_DATA}.
     */
    public static void main(String[] args) throws IOException {
        QueueStage s = new QueueStage(Paths.get(args[0]), Long.parseLong(args[1]));
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.US_ASCII));
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            String[] f = line.split(" ", -1);
            byte[] data = new byte[f[1].length() / 2];
            for (int i = 0; i < data.length; i++) {
                data[i] = (byte) Integer.parseInt(f[1].substring(2 * i, 2 * i + 2), 16);
            }
            s.add(data, f[0].equals("-") ? null : Long.valueOf(f[0]));
        }
        s.finish();
        System.out.println(s.rows());
    }
}
