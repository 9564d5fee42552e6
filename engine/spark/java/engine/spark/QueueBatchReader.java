package engine.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayDeque;
import java.util.HashSet;
import java.util.List;
import java.util.Set;

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
 * Reads one {@link QueuePlan.Part} as columnar batches, as {@code queuesource.pending_runs} reads it:
 * the reader's checkpoint file (head and the ids confirmed out of order), then the journal files
 * from the one holding the first id after the head (or {@code after}) through the column cursor's
 * rules ({@link QueueFiles#readJournal}: the newest file as one a writer may be writing), each run
 * of PUTs cut at {@code upto} and masked: ids confirmed out of order and BURNT records (added and
 * expiring at the epoch, no data) are not items, nor ids outside {@link QueuePlan.Part#only} (a
 * stream's handed-out ids, a batch read's pushed {@code id IN}). A journal file is opened only if
 * its ids (its first id to the next file's) can hold one the part reads. One batch per run; only
 * the columns of the read schema are built. {@code mode} as {@code batches.guarded}: the read
 * stops at the first damage, FAILFAST fails, DROPMALFORMED ends the part with a warning,
 * PERMISSIVE adds one row whose {@code _corrupt_record} names the file and the offset.
 */
public final class QueueBatchReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger("engine.spark");
    static final String CORRUPT = "_corrupt_record";

    private final Hfs fs;
    private final QueuePlan.Part part;
    private final StructType schema;
    private final String mode;
    private final ArrayDeque<ColumnarBatch> ready = new ArrayDeque<>();
    private ColumnarBatch current;
    private boolean started;
    private boolean done;
    private List<QueuePlan.Segment> segs;
    private int nextSeg;
    private long start;
    private long head;
    private Set<Long> doneIds;
    private long last;
    private boolean finished;

    public QueueBatchReader(Hfs fs, QueuePlan.Part part, StructType schema, String mode) {
        this.fs = fs;
        this.part = part;
        this.schema = schema;
        this.mode = mode;
    }

    @Override
    public boolean next() {
        while (true) {
            if (!ready.isEmpty()) {
                current = ready.poll();
                return true;
            }
            if (error != null) {
                // The runs before the damage went out first, as the Python reader yields them.
                CorruptFileException e = error;
                error = null;
                if (mode.equals("FAILFAST")) {
                    throw e;
                }
                if (mode.equals("DROPMALFORMED")) {
                    LOG.warn("{}: queue '{}', reader '{}': damaged, the rest is left out: {}", part.directory,
                        part.queue, part.reader, e.getMessage());
                    return false;
                }
                ready.add(corruptRow(e));
                continue;
            }
            if (done) {
                checkHandedOut();
                return false;
            }
            try {
                if (!readNextFile()) {
                    done = true;
                }
            } catch (CorruptFileException e) {
                done = true;
                error = e;
            }
        }
    }

    private CorruptFileException error;
    /** Rows read of a stream's handed-out ids (Part.only), and whether they were checked. */
    private long handedRead;
    private boolean handedChecked;

    /** A stream's micro-batch: every id its reader handed out is read, or that is data loss (never silent). */
    private void checkHandedOut() {
        long want = part.onlyCount();
        if (handedChecked || want < 0 || handedRead >= want) {
            return;
        }
        handedChecked = true;
        String what = QueueOptions.SOURCE + " stream of queue '" + part.queue + "', reader '" + part.reader + "' in "
            + part.directory + ": " + (want - handedRead) + " of the " + want + " items its reader handed out for this"
            + " micro-batch (ids " + part.only[0] + ".." + part.only[part.only.length - 1]
            + ") are not pending in the journal any more";
        if (part.failOnDataLoss) {
            throw new IllegalStateException(what + " (set failOnDataLoss=false to go on without them)");
        }
        LOG.warn("{}; going on without them (failOnDataLoss=false)", what);
    }

    /** Reads the next journal file into {@link #ready}; false when there is none to read. */
    private boolean readNextFile() {
        if (finished) {
            return false;
        }
        if (!started) {
            started = true;
            String path = Hfs.join(part.directory, part.queue + ".read." + part.reader);
            long[] doneList = new long[0];
            head = 0;
            if (fs.exists(path)) {
                byte[] data = fs.readAll(path);
                QueueCodec.ReaderFile r = QueueFiles.readReader(path, data, data.length);
                head = r.head;
                doneList = r.done;
            }
            // ReaderState: done ids above the head; the head swallows the run right after it.
            doneIds = new HashSet<>();
            for (long d : doneList) {
                if (d > head) {
                    doneIds.add(d);
                }
            }
            while (doneIds.remove(head + 1)) {
                head++;
            }
            start = part.after < 0 ? head : Math.max(head, part.after);
            segs = QueuePlan.listSegments(fs, part.directory, part.queue, true, part.known);
            if (segs.isEmpty()) {
                return false;
            }
            nextSeg = 0;
            for (int k = 0; k < segs.size(); k++) {
                if (segs.get(k).firstId >= 0 && segs.get(k).firstId <= start + 1) {
                    nextSeg = k;
                }
            }
        }
        if (nextSeg >= segs.size()) {
            return false;
        }
        QueuePlan.Segment seg = segs.get(nextSeg++);
        boolean growing = nextSeg == segs.size();
        long nextId = growing ? -1 : segs.get(nextSeg).firstId;
        // A file is opened only if it can hold an id the part reads: its ids are its first id's (the
        // plan read it behind its CHECK) up to the next file's first (ids increase through the journal).
        // A file left out is not read at all, so damage in it is not reported by this part.
        if (part.upto >= 0 && seg.firstId > part.upto) {
            finished = true;
            return false;
        }
        if (seg.firstId >= 0 && nextId >= 0 && !part.admitsAny(seg.firstId, nextId - 1)) {
            return true;
        }
        if (!fs.exists(seg.path)) {
            return true; // retired meanwhile: as if listed a moment later
        }
        byte[] data = fs.readAll(seg.path);
        QueueFiles.readJournal(seg.path, data, data.length, last, nextId, growing, (c, before) -> {
            last = c.ids[c.items - 1];
            int first = 0;
            if (c.ids[0] <= start) {
                first = upper(c.ids, c.items, start);
            }
            if (first >= c.items) {
                return true;
            }
            int stop = c.items;
            if (part.upto >= 0 && c.ids[c.items - 1] > part.upto) {
                stop = upper(c.ids, c.items, part.upto);
            }
            if (stop > first) {
                ColumnarBatch b = build(c, data, first, stop);
                if (b.numRows() > 0) {
                    ready.add(b);
                }
            }
            if (part.upto >= 0 && last >= part.upto) {
                finished = true;
                return false;
            }
            return true;
        });
        return true;
    }

    /** The index of the first id above {@code x} (ids ascending: the cursor checked). */
    private static int upper(long[] ids, int n, long x) {
        int lo = 0;
        int hi = n;
        while (lo < hi) {
            int mid = (lo + hi) >>> 1;
            if (ids[mid] <= x) {
                lo = mid + 1;
            } else {
                hi = mid;
            }
        }
        return lo;
    }

    private boolean pending(QueueCodec.Columns c, int k) {
        if ((!doneIds.isEmpty() && doneIds.contains(c.ids[k])) || !part.admits(c.ids[k])) {
            return false;
        }
        // BURNT: an id a crash took out of the journal (codec.is_burnt), not an item.
        return !(c.addTimes[k] == 0 && c.hasExpiry[k] && c.expireTimes[k] == 0 && c.dataLen[k] == 0);
    }

    private ColumnarBatch build(QueueCodec.Columns c, byte[] data, int first, int stop) {
        int[] rows = new int[stop - first];
        int m = 0;
        for (int k = first; k < stop; k++) {
            if (pending(c, k)) {
                rows[m++] = k;
            }
        }
        StructField[] fields = schema.fields();
        ColumnVector[] cols = new ColumnVector[fields.length];
        for (int i = 0; i < fields.length; i++) {
            String name = fields[i].name();
            if (name.equals("queue") || name.equals("reader") || name.equals(CORRUPT)) {
                ConstantColumnVector v = new ConstantColumnVector(m, fields[i].dataType());
                if (name.equals(CORRUPT)) {
                    v.setNull();
                } else {
                    v.setUtf8String(UTF8String.fromString(name.equals("queue") ? part.queue : part.reader));
                }
                cols[i] = v;
                continue;
            }
            WritableColumnVector v = new OnHeapColumnVector(Math.max(m, 1), fields[i].dataType());
            cols[i] = v;
            fill(v, name, c, data, rows, m, first, m == stop - first);
        }
        ColumnarBatch batch = new ColumnarBatch(cols);
        batch.setNumRows(m);
        handedRead += m;
        return batch;
    }

    /**
     * Column {@code name} of the batch: rows {@code rows[0..m)} of the run (the column chosen once,
     * then one loop per column; {@code dense}: every row of {@code first..first+m} is an item, so the
     * ids are copied in one call).
     */
    private static void fill(WritableColumnVector v, String name, QueueCodec.Columns c, byte[] data, int[] rows,
                             int m, int first, boolean dense) {
        switch (name) {
            case "id":
                if (dense) {
                    v.putLongs(0, m, c.ids, first);
                } else {
                    for (int r = 0; r < m; r++) {
                        v.putLong(r, c.ids[rows[r]]);
                    }
                }
                break;
            case "add_time":
                for (int r = 0; r < m; r++) {
                    v.putLong(r, c.addTimes[rows[r]] * 1000);
                }
                break;
            case "expire_time":
                for (int r = 0; r < m; r++) {
                    int k = rows[r];
                    if (c.hasExpiry[k]) {
                        v.putLong(r, c.expireTimes[k] * 1000);
                    } else {
                        v.putNull(r);
                    }
                }
                break;
            case "error_count":
                for (int r = 0; r < m; r++) {
                    v.putInt(r, c.errorCounts[rows[r]]);
                }
                break;
            case "data":
                long bytes = 0;
                for (int r = 0; r < m; r++) {
                    bytes += c.dataLen[rows[r]];
                }
                // The payloads' bytes reserved at once (not grown by doubling while appended).
                v.arrayData().reserve((int) Math.min(bytes, Integer.MAX_VALUE - 16));
                for (int r = 0; r < m; r++) {
                    int k = rows[r];
                    v.putByteArray(r, data, c.dataAt[k], c.dataLen[k]);
                }
                break;
            default:
                throw new ConfigException(QueueOptions.SOURCE + " has no column '" + name + "'");
        }
    }

    @Override
    public ColumnarBatch get() {
        return current;
    }

    @Override
    public void close() {
        fs.close();
    }

    /** PERMISSIVE: one row for damage that ends the part ({@code batches.corrupt_batch}). */
    private ColumnarBatch corruptRow(CorruptFileException e) {
        StructField[] fields = schema.fields();
        ColumnVector[] cols = new ColumnVector[fields.length];
        for (int c = 0; c < fields.length; c++) {
            String name = fields[c].name();
            WritableColumnVector v = new OnHeapColumnVector(1, fields[c].dataType());
            String text = name.equals("queue") ? part.queue : name.equals("reader") ? part.reader
                : name.equals(CORRUPT) ? e.damageText() : null;
            if (text == null) {
                v.putNull(0);
            } else {
                byte[] b = text.getBytes(StandardCharsets.UTF_8);
                v.putByteArray(0, b, 0, b.length);
            }
            cols[c] = v;
        }
        ColumnarBatch batch = new ColumnarBatch(cols);
        batch.setNumRows(1);
        return batch;
    }
}
