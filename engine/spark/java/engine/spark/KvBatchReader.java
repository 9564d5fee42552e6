package engine.spark;

import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;

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
 * Reads one {@link KvSource.Part} as columnar batches of {@link #BATCH_ROWS} keys, as
 * {@code kvsource.read_keys}: the store opened ({@link KvTree#open}), a named tree the store
 * lacks read as empty, then the scan of [start, stop) one leaf at a time
 * ({@link KvTree#fetch}), each batch from one state of the store file ({@link #readSettled}).  {@code mode} as {@code batches.guarded}: the reader stops at
 * the first damage, the keys since the last whole batch are left out, FAILFAST fails,
 * DROPMALFORMED ends the part with a warning, PERMISSIVE adds one row whose
 * {@code _corrupt_record} names the file and the offset.
 */
public final class KvBatchReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger("engine.spark");
    /** Keys per batch ({@code kvsource.BATCH_ROWS}). */
    static final int BATCH_ROWS = 4096;

    private final Hfs fs;
    private final KvSource.Part part;
    private final StructType schema;
    private final String mode;
    private final String store;
    private final String label;
    private KvTree tree;
    private byte[] lower;
    private boolean started;
    private boolean scanned;
    private boolean done;
    private final List<byte[]> keys = new ArrayList<>();
    private final List<byte[]> values = new ArrayList<>();
    private ColumnarBatch current;
    /** The key and value vectors, reused batch after batch (Spark copies a batch's rows before the next). */
    private WritableColumnVector[] vectors;

    public KvBatchReader(Hfs fs, KvSource.Part part, StructType schema, String mode) {
        this.fs = fs;
        this.part = part;
        this.schema = schema;
        this.mode = mode;
        this.store = PagesFile.storeName(part.path);
        this.label = new String(part.tree, StandardCharsets.UTF_8);
    }

    @Override
    public boolean next() {
        if (done) {
            return false;
        }
        try {
            if (!started) {
                started = true;
                tree = KvTree.open(fs, part.path);
                lower = part.start;
            }
            if (!scanned) {
                readSettled();
            }
            int n = keys.size();
            if (n == 0) {
                done = true;
                return false;
            }
            current = build(n);
            keys.clear();
            values.clear();
            return true;
        } catch (CorruptFileException | RecoveryNeededException | PageException e) {
            done = true;
            if (mode.equals("FAILFAST")) {
                throw e;
            }
            if (mode.equals("DROPMALFORMED")) {
                LOG.warn("{}: damaged, the rest is left out: {}", part.path, e.getMessage());
                return false;
            }
            String text = e instanceof CorruptFileException ? ((CorruptFileException) e).damageText()
                : e instanceof PageException ? ((PageException) e).damageText()
                : ((RecoveryNeededException) e).damageText();
            current = corruptRow(text);
            return true;
        }
    }

    /** One batch read: its pairs, the key the next one starts from, whether the scan ended. */
    private static final class Batch {
        final List<byte[]> keys = new ArrayList<>();
        final List<byte[]> values = new ArrayList<>();
        byte[] from;
        boolean end;
    }

    /**
     * The next batch: up to {@link #BATCH_ROWS} keys from {@link #lower} into {@link #keys} and
     * {@link #values}, read from one state of the store file ({@link KvTree#settled}: its
     * descents and leaves read between two loads of the change count, all of it read again from
     * the same key when the count moved; a commit between two leaf reads, such as a split
     * moving keys, would otherwise give a key twice or miss one).  The batch ends inside a leaf
     * when it is full, the next one resuming from the first key left.  Batches are each one
     * commit, in key order: a key present all along is read once.
     */
    private void readSettled() {
        Batch b = tree.settled(() -> {
            Batch got = new Batch();
            got.from = lower;
            long[] info = tree.info(part.tree);
            got.end = info == null;  // no such tree (in this commit): nothing
            while (!got.end && got.keys.size() < BATCH_ROWS) {
                KvTree.Fetched f = tree.fetch(info, got.from, part.stop);
                int room = BATCH_ROWS - got.keys.size();
                if (f.keys.size() > room) {
                    got.keys.addAll(f.keys.subList(0, room));
                    got.values.addAll(f.values.subList(0, room));
                    got.from = f.keys.get(room);
                    break;
                }
                got.keys.addAll(f.keys);
                got.values.addAll(f.values);
                got.end = f.hi == null || (part.stop != null && KvTree.cmp(f.hi, part.stop) >= 0);
                got.from = f.hi;
            }
            return got;
        });
        keys.addAll(b.keys);
        values.addAll(b.values);
        lower = b.from;
        scanned = b.end;
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
        if (tree != null) {
            tree.file.close();
        }
    }

    private ColumnarBatch build(int n) {
        StructField[] fields = schema.fields();
        ColumnVector[] cols = new ColumnVector[fields.length];
        if (vectors == null) {
            vectors = new WritableColumnVector[fields.length];
        }
        for (int c = 0; c < fields.length; c++) {
            String name = fields[c].name();
            if (name.equals("key") || name.equals("value")) {
                List<byte[]> src = name.equals("key") ? keys : values;
                int total = 0;
                for (int r = 0; r < n; r++) {
                    total += src.get(r).length;
                }
                if (vectors[c] == null) {
                    vectors[c] = new OnHeapColumnVector(BATCH_ROWS, fields[c].dataType());
                }
                WritableColumnVector v = vectors[c];
                v.reset();
                v.arrayData().reserve(total);
                for (int r = 0; r < n; r++) {
                    byte[] b = src.get(r);
                    v.putByteArray(r, b, 0, b.length);
                }
                cols[c] = v;
                continue;
            }
            ConstantColumnVector v = new ConstantColumnVector(n, fields[c].dataType());
            if (name.equals("store")) {
                v.setUtf8String(UTF8String.fromString(store));
            } else if (name.equals("tree")) {
                v.setUtf8String(UTF8String.fromString(label));
            } else if (name.equals(ScanParts.CORRUPT)) {
                v.setNull();
            } else {
                throw new ConfigException(KvSource.SOURCE + " has no column '" + name + "'");
            }
            cols[c] = v;
        }
        ColumnarBatch batch = new ColumnarBatch(cols);
        batch.setNumRows(n);
        return batch;
    }

    /** PERMISSIVE: one row for damage that ends the part ({@code batches.corrupt_batch}). */
    private ColumnarBatch corruptRow(String text) {
        StructField[] fields = schema.fields();
        ColumnVector[] cols = new ColumnVector[fields.length];
        for (int c = 0; c < fields.length; c++) {
            String name = fields[c].name();
            WritableColumnVector v = new OnHeapColumnVector(1, fields[c].dataType());
            String s = name.equals("store") ? store : name.equals("tree") ? label
                : name.equals(ScanParts.CORRUPT) ? text : null;
            if (s == null) {
                v.putNull(0);
            } else {
                byte[] b = s.getBytes(StandardCharsets.UTF_8);
                v.putByteArray(0, b, 0, b.length);
            }
            cols[c] = v;
        }
        ColumnarBatch batch = new ColumnarBatch(cols);
        batch.setNumRows(1);
        return batch;
    }
}
