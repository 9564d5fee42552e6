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
 * Reads one {@link PagesSource.Part} as columnar batches, as {@code pagesource.read_pages}: the
 * store opened and its state loaded ({@link PagesFile#load}: free list and every free page
 * checked), then runs of {@link #BATCH_PAGES} page ids, each page of a run read (one read) and
 * every live one checked before the run becomes a batch, whatever columns are asked for.  The
 * JVM holds no lock ({@link PagesFile}): each run is read from one state of the store file, a
 * seqlock over its change count ({@link #readSettled}).  {@code mode} as {@code batches.guarded}: the reader stops at the first damage, the
 * run being read is left out, FAILFAST fails, DROPMALFORMED ends the part with a warning,
 * PERMISSIVE adds one row whose {@code _corrupt_record} names the file and the offset.
 */
public final class PagesBatchReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger("engine.spark");
    static final String CORRUPT = ScanParts.CORRUPT;
    /** Pages per batch ({@code pagesource.BATCH_PAGES}). */
    static final int BATCH_PAGES = 1024;
    /** How often a read that raced a writer is tried again before its error stands. */
    static final int ATTEMPTS = 400;

    private final Hfs fs;
    private final PagesSource.Part part;
    private final StructType schema;
    private final String mode;
    private final String store;
    private PagesFile file;
    private long at;
    private boolean done;
    private byte[] buf = new byte[0];
    private ColumnarBatch current;
    private WritableColumnVector[] vectors;

    public PagesBatchReader(Hfs fs, PagesSource.Part part, StructType schema, String mode) {
        this.fs = fs;
        this.part = part;
        this.schema = schema;
        this.mode = mode;
        this.store = PagesFile.storeName(part.path);
    }

    @Override
    public boolean next() {
        while (!done) {
            try {
                if (file == null) {
                    file = PagesFile.open(fs, part.path);
                    at = part.lo;
                }
                int n = readSettled();
                if (n == 0) {
                    done = true;
                    return false;
                }
                ColumnarBatch b = build(n);
                at += n;
                if (b.numRows() > 0) {
                    current = b;
                    return true;
                }
            } catch (CorruptFileException | RecoveryNeededException e) {
                done = true;
                if (mode.equals("FAILFAST")) {
                    throw e;
                }
                if (mode.equals("DROPMALFORMED")) {
                    LOG.warn("{}: damaged, the rest is left out: {}", part.path, e.getMessage());
                    return false;
                }
                current = corruptRow(e instanceof CorruptFileException ? ((CorruptFileException) e).damageText()
                    : ((RecoveryNeededException) e).damageText());
                return true;
            }
        }
        return false;
    }

    /**
     * The next run of pages from {@link #at} read into {@link #buf} from one state of the store
     * file (its state loaded, or taken over from the planner, and its pages read between the two
     * loads of the change count, {@link PagesFile#begin} and {@link PagesFile#stands}; all of it
     * again when the count moved): how many pages, 0 at the end of the part.  Damage found while
     * the count moved is looked at again before it is reported.  A writer changing the file at
     * every try: the task fails ({@link StoreGate#busy}); without a count, as before it existed,
     * the last run read stands.
     */
    private int readSettled() {
        for (int attempt = 0; ; attempt++) {
            long seen = file.begin();
            int n = -1;
            try {
                if (!file.current(seen)
                    && (part.planned == null || !file.adopt(part.planned, seen, part.freeIn, part.lo, part.hi))) {
                    file.load();
                }
                n = (int) Math.max(0, Math.min(BATCH_PAGES, Math.min(part.hi, file.pageCount + 1) - at));
                if (n > 0) {
                    readRun(n);
                }
                if (file.stands(seen)) {
                    file.stood(seen);
                    return n;
                }
            } catch (CorruptFileException e) {
                if (attempt >= ATTEMPTS && seen == StoreGate.NONE || file.stands(seen)) {
                    throw e;
                }
            }
            if (attempt >= ATTEMPTS) {
                if (seen != StoreGate.NONE) {
                    throw StoreGate.busy(part.path, attempt);
                }
                return n;  // no count: a writer changing the file all along, the last run read stands
            }
            PagesFile.backoff(attempt);
        }
    }

    /** Pages {@code [at, at + n)} into {@link #buf} (one read, each live page checked). */
    private void readRun(int n) {
        if (Boolean.TRUE.equals(part.free)) {
            return;  // free pages only: their data is not returned, and load() checked them
        }
        long need = (long) n * file.pageSize;
        if (buf.length < need) {
            buf = new byte[(int) need];
        }
        file.readRun(at, n, buf);
    }

    @Override
    public ColumnarBatch get() {
        return current;
    }

    @Override
    public void close() {
        fs.close();
        if (file != null) {
            file.close();
        }
        if (vectors != null) {
            for (WritableColumnVector v : vectors) {
                if (v != null) {
                    v.close();
                }
            }
        }
    }

    private ColumnarBatch build(int n) {
        int ps = file.pageSize;
        int[] rows = new int[n];
        int m = 0;
        for (int i = 0; i < n; i++) {
            boolean free = file.free.contains(at + i);
            if (part.free == null || part.free == free) {
                rows[m++] = i;
            }
        }
        StructField[] fields = schema.fields();
        if (vectors == null) {
            vectors = new WritableColumnVector[fields.length];
        }
        ColumnVector[] cols = new ColumnVector[fields.length];
        for (int c = 0; c < fields.length; c++) {
            String name = fields[c].name();
            if (name.equals("store") || name.equals(CORRUPT)) {
                ConstantColumnVector v = new ConstantColumnVector(m, fields[c].dataType());
                if (name.equals("store")) {
                    v.setUtf8String(UTF8String.fromString(store));
                } else {
                    v.setNull();
                }
                cols[c] = v;
                continue;
            }
            if (vectors[c] == null) {
                vectors[c] = new OnHeapColumnVector(BATCH_PAGES, fields[c].dataType());
            }
            WritableColumnVector v = vectors[c];
            v.reset();
            cols[c] = v;
            for (int r = 0; r < m; r++) {
                long page = at + rows[r];
                switch (name) {
                    case "page":
                        v.putLong(r, page);
                        break;
                    case "offset":
                        v.putLong(r, page * ps);
                        break;
                    case "free":
                        v.putBoolean(r, file.free.contains(page));
                        break;
                    case "data":
                        if (file.free.contains(page)) {
                            v.putByteArray(r, buf, 0, 0);
                        } else {
                            v.putByteArray(r, buf, rows[r] * ps, ps);
                        }
                        break;
                    default:
                        throw new ConfigException(SOURCE_HAS_NO + "'" + name + "'");
                }
            }
        }
        ColumnarBatch batch = new ColumnarBatch(cols);
        batch.setNumRows(m);
        return batch;
    }

    private static final String SOURCE_HAS_NO = PagesSource.SOURCE + " has no column ";

    /** PERMISSIVE: one row for damage that ends the part ({@code batches.corrupt_batch}). */
    private ColumnarBatch corruptRow(String text) {
        StructField[] fields = schema.fields();
        ColumnVector[] cols = new ColumnVector[fields.length];
        for (int c = 0; c < fields.length; c++) {
            String name = fields[c].name();
            WritableColumnVector v = new OnHeapColumnVector(1, fields[c].dataType());
            if (name.equals("store")) {
                byte[] b = store.getBytes(StandardCharsets.UTF_8);
                v.putByteArray(0, b, 0, b.length);
            } else if (name.equals(CORRUPT)) {
                byte[] b = text.getBytes(StandardCharsets.UTF_8);
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
