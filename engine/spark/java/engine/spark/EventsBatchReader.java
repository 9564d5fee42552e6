package engine.spark;

import java.nio.charset.StandardCharsets;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads one {@link EventsPlan.Part} as columnar batches, from the snapshot the plan loaded
 * ({@link EventsJournal#snapshot}: the part's entries and committed end): each id of the part is replayed
 * ({@link EventsJournal#replay}) into batches of up to {@link #BATCH_EVENTS} events of that id
 * ({@code eventsource.read_events}), so {@code journal} and {@code persistence_id} are constant
 * vectors; only the columns of the read schema are built.  {@code mode} as
 * {@code batches.guarded}: the reader stops at the first damage, the batch being filled is left
 * out (as the Python reader's), FAILFAST fails, DROPMALFORMED ends the part with a warning,
 * PERMISSIVE adds one row whose {@code _corrupt_record} names the file and the offset.
 */
public final class EventsBatchReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger("engine.spark");
    static final String CORRUPT = "_corrupt_record";
    /** Events per batch ({@code eventsource.BATCH_EVENTS}). */
    static final int BATCH_EVENTS = 8192;

    private final Hfs fs;
    private final EventsPlan.Part part;
    private final StructType schema;
    private final String mode;
    private final boolean payloads;
    private EventsJournal journal;
    private int nextId;
    private boolean done;
    private ColumnarBatch current;
    // The id being replayed and the events decoded for its next batches.
    private String pid;
    private EventsJournal.Cursor cursor;
    private final java.util.ArrayDeque<Chunk> ready = new java.util.ArrayDeque<>();
    private Chunk filling;
    /** A chunk already turned into a batch, reused for the next (its vectors hold copies). */
    private Chunk spare;
    private WritableColumnVector[] vectors;

    /** Up to BATCH_EVENTS events of one id. */
    private static final class Chunk {
        final long[] seqs = new long[BATCH_EVENTS];
        int[] starts = new int[BATCH_EVENTS + 1];
        byte[] bytes;
        int n;
        int used;

        Chunk(boolean payloads) {
            bytes = new byte[payloads ? 1 << 16 : 0];
        }
    }

    public EventsBatchReader(Hfs fs, EventsPlan.Part part, StructType schema, String mode) {
        this.fs = fs;
        this.part = part;
        this.schema = schema;
        this.mode = mode;
        this.payloads = java.util.Arrays.asList(schema.fieldNames()).contains("payload");
    }

    @Override
    public boolean next() {
        while (!done) {
            try {
                if (!ready.isEmpty()) {
                    Chunk c = ready.poll();
                    current = build(c);
                    spare = c;
                    return true;
                }
                if (!replayNext()) {
                    done = true;
                    return false;
                }
            } catch (CorruptFileException e) {
                done = true;
                ready.clear();
                if (mode.equals("FAILFAST")) {
                    throw e;
                }
                if (mode.equals("DROPMALFORMED")) {
                    LOG.warn("{}: damaged, the rest is left out: {}", part.directory, e.getMessage());
                    return false;
                }
                current = corruptRow(e);
                return true;
            }
        }
        return false;
    }

    /**
     * Fills the next batch of the part into {@link #ready}: the rest of the current id's replay up
     * to {@link #BATCH_EVENTS} events, or the next id's; false when every id was read.
     */
    private boolean replayNext() {
        if (journal == null) {
            journal = EventsJournal.snapshot(fs, part.directory, part.ids, part.end);
        }
        while (cursor == null || cursor.done) {
            if (nextId >= part.ids.size()) {
                return false;
            }
            EventsJournal.Entry e = part.ids.get(nextId++);
            pid = e.pid;
            filling = null;
            cursor = journal.start(e, part.fromSeq, part.toSeq);
        }
        while (!cursor.done && ready.isEmpty()) {
            journal.step(cursor, this::add, BATCH_EVENTS - (filling == null ? 0 : filling.n));
        }
        if (cursor.done && filling != null && filling.n > 0) {
            ready.add(filling);  // the id's last, partial batch
        }
        if (cursor.done) {
            filling = null;
        }
        return true;
    }

    private void add(long seq, byte[] buf, int at, int len) {
        Chunk c = filling;
        if (c == null) {
            c = spare != null ? spare : new Chunk(payloads);
            spare = null;
            c.n = 0;
            c.used = 0;
            filling = c;
        }
        c.seqs[c.n] = seq;
        if (payloads) {
            if (c.used + len > c.bytes.length) {
                c.bytes = java.util.Arrays.copyOf(c.bytes, (int) Math.min(Integer.MAX_VALUE - 8,
                    Math.max(2L * c.bytes.length, (long) c.used + len)));
            }
            System.arraycopy(buf, at, c.bytes, c.used, len);
            c.used += len;
        }
        c.n++;
        c.starts[c.n] = c.used;
        if (c.n == BATCH_EVENTS) {
            ready.add(c);  // whole: handed out even if the replay fails later (as read_events' yield)
            filling = null;
        }
    }

    @Override
    public ColumnarBatch get() {
        return current;
    }

    @Override
    public void close() {
        fs.close();
        if (vectors != null) {
            for (WritableColumnVector v : vectors) {
                if (v != null) {
                    v.close();
                }
            }
        }
    }

    private ColumnarBatch build(Chunk c) {
        StructField[] fields = schema.fields();
        if (vectors == null) {
            vectors = new WritableColumnVector[fields.length];
        }
        ColumnVector[] cols = new ColumnVector[fields.length];
        int m = c.n;
        for (int i = 0; i < fields.length; i++) {
            String name = fields[i].name();
            if (!name.equals("sequence_nr") && !name.equals("payload")) {
                ConstantColumnVector v = new ConstantColumnVector(m, fields[i].dataType());
                if (name.equals("journal")) {
                    v.setUtf8String(UTF8String.fromString(part.journal));
                } else if (name.equals("persistence_id")) {
                    v.setUtf8String(UTF8String.fromString(pid));
                } else if (name.equals(CORRUPT)) {
                    v.setNull();
                } else {
                    throw new ConfigException(EventsOptions.SOURCE + " has no column '" + name + "'");
                }
                cols[i] = v;
                continue;
            }
            if (vectors[i] == null) {
                vectors[i] = new OnHeapColumnVector(BATCH_EVENTS, fields[i].dataType());
            }
            WritableColumnVector v = vectors[i];
            v.reset();
            cols[i] = v;
            if (name.equals("sequence_nr")) {
                v.putLongs(0, m, c.seqs, 0);
            } else {
                v.arrayData().reserve(c.used);
                for (int r = 0; r < m; r++) {
                    v.putByteArray(r, c.bytes, c.starts[r], c.starts[r + 1] - c.starts[r]);
                }
            }
        }
        ColumnarBatch batch = new ColumnarBatch(cols);
        batch.setNumRows(m);
        return batch;
    }

    /** PERMISSIVE: one row for damage that ends the part ({@code batches.corrupt_batch}). */
    private ColumnarBatch corruptRow(CorruptFileException e) {
        StructField[] fields = schema.fields();
        ColumnVector[] cols = new ColumnVector[fields.length];
        for (int c = 0; c < fields.length; c++) {
            String name = fields[c].name();
            WritableColumnVector v = new OnHeapColumnVector(1, fields[c].dataType());
            if (name.equals("journal")) {
                byte[] b = part.journal.getBytes(StandardCharsets.UTF_8);
                v.putByteArray(0, b, 0, b.length);
            } else if (name.equals(CORRUPT)) {
                byte[] b = e.damageText().getBytes(StandardCharsets.UTF_8);
                v.putByteArray(0, b, 0, b.length);
            } else {
                v.putNull(0);
            }
            cols[c] = v;
        }
        ColumnarBatch batch = new ColumnarBatch(cols);
        batch.setNumRows(1);
        return batch;
    }
}
