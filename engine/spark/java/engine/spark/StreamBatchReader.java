package engine.spark;

import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
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
 * Reads one {@link StreamSource.Part} (whole journals, one after the other) as columnar batches
 * of up to {@link #BATCH} streams of one journal, as {@code streamsource.read_journal} reads
 * them: the streams as {@link StreamScanner} gives them, then the anomalies' error.  Only the
 * columns of the read schema are built, and the scanner copies idents and data only when
 * {@code ident} / {@code data} are among them.  {@code mode} as {@code batches.guarded}: the
 * streams read whole before damage are rows, then FAILFAST fails, DROPMALFORMED ends the
 * journal with a warning, PERMISSIVE adds one row whose {@code _corrupt_record} names the file
 * and the offset; the part's next journal is read either way.
 */
final class StreamBatchReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger("engine.spark");
    /** Streams per batch. */
    static final int BATCH = 4096;
    private static final byte[] COMPLETE = "complete".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] ABORTED = "aborted".getBytes(StandardCharsets.US_ASCII);
    private static final byte[] OPEN = "open".getBytes(StandardCharsets.US_ASCII);

    private final Hfs fs;
    private final StreamSource.Part part;
    private final StructField[] fields;
    private final String mode;
    private final boolean ident;
    private final boolean data;
    private int next;
    private String path;
    private UTF8String journal;
    private StreamScanner scanner;
    /** Damage found while a batch was being filled: handled after that batch. */
    private CorruptFileException pending;
    private ColumnarBatch current;

    StreamBatchReader(Hfs fs, StreamSource.Part part, StructType schema, String mode) {
        this.fs = fs;
        this.part = part;
        this.fields = schema.fields();
        this.mode = mode;
        List<String> names = List.of(schema.fieldNames());
        this.ident = names.contains("ident");
        this.data = names.contains("data");
    }

    @Override
    public boolean next() {
        while (true) {
            try {
                if (pending != null) {
                    CorruptFileException e = pending;
                    pending = null;
                    throw e;
                }
                if (scanner == null) {
                    if (next >= part.paths.length) {
                        return false;
                    }
                    path = part.paths[next++];
                    journal = UTF8String.fromString(path.substring(path.lastIndexOf('/') + 1));
                    scanner = new StreamScanner(fs.fresh(), path, StreamScanner.WINDOW, ident, data);
                }
                ColumnarBatch batch = fill();
                if (batch != null) {
                    current = batch;
                    return true;
                }
                List<String> anomalies = scanner.anomalies;
                endJournal();
                if (!anomalies.isEmpty()) {
                    // What the store's own verify rejects (a torn transaction at the end is
                    // not damage: the scan stops before it, as the store's readers do).
                    throw new CorruptFileException(path, 0, "records consistent with their streams",
                        String.join("; ", anomalies));
                }
            } catch (CorruptFileException e) {
                endJournal();
                if (mode.equals("FAILFAST")) {
                    throw e;
                }
                if (mode.equals("PERMISSIVE")) {
                    current = corruptRow(e);
                    return true;
                }
                LOG.warn("{}: damaged, the rest is left out: {}", path, e.getMessage());
            }
        }
    }

    /** The next streams of the journal (null: none left); damage after some is {@link #pending}. */
    private ColumnarBatch fill() {
        WritableColumnVector[] vs = new WritableColumnVector[fields.length];
        ColumnVector[] cols = new ColumnVector[fields.length];
        for (int i = 0; i < fields.length; i++) {
            String name = fields[i].name();
            if (name.equals("journal") || name.equals(ScanParts.CORRUPT)) {
                continue;  // constant: set once the rows are counted
            }
            vs[i] = new OnHeapColumnVector(BATCH, fields[i].dataType());
            cols[i] = vs[i];
        }
        int n = 0;
        try {
            for (StreamCodec.Stream st = n < BATCH ? scanner.next() : null; st != null; ) {
                put(vs, n++, st);
                st = n < BATCH ? scanner.next() : null;
            }
        } catch (CorruptFileException e) {
            if (n == 0) {
                throw e;
            }
            pending = e;
        }
        if (n == 0) {
            return null;
        }
        for (int i = 0; i < fields.length; i++) {
            if (cols[i] == null) {
                ConstantColumnVector v = new ConstantColumnVector(n, fields[i].dataType());
                if (fields[i].name().equals("journal")) {
                    v.setUtf8String(journal);
                } else {
                    v.setNull();
                }
                cols[i] = v;
            }
        }
        ColumnarBatch batch = new ColumnarBatch(cols);
        batch.setNumRows(n);
        return batch;
    }

    private void put(WritableColumnVector[] vs, int r, StreamCodec.Stream st) {
        for (int i = 0; i < fields.length; i++) {
            WritableColumnVector v = vs[i];
            if (v == null) {
                continue;
            }
            switch (fields[i].name()) {
                case "stream":
                    v.putLong(r, st.number);
                    break;
                case "ident":
                    byte[] id = utf8(st.ident);
                    v.putByteArray(r, id, 0, id.length);
                    break;
                case "start_offset":
                    v.putLong(r, st.startOffset);
                    break;
                case "status":
                    byte[] s = st.status.equals("complete") ? COMPLETE : st.status.equals("aborted") ? ABORTED : OPEN;
                    v.putByteArray(r, s, 0, s.length);
                    break;
                case "bytes":
                    v.putLong(r, st.length);
                    break;
                case "data":
                    v.putByteArray(r, st.data, 0, st.data.length);
                    break;
                default:
                    throw new ConfigException(StreamSource.SOURCE + " has no column '" + fields[i].name() + "'");
            }
        }
    }

    /** bytes.decode("utf-8", "replace") as UTF-8 (ASCII, the usual ident, as it is). */
    static byte[] utf8(byte[] b) {
        boolean ascii = true;
        for (byte x : b) {
            ascii &= x >= 0;
        }
        if (ascii) {
            return b;
        }
        try {
            return StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPLACE)
                .onUnmappableCharacter(CodingErrorAction.REPLACE).decode(java.nio.ByteBuffer.wrap(b)).toString()
                .getBytes(StandardCharsets.UTF_8);
        } catch (java.nio.charset.CharacterCodingException e) {
            throw new IllegalStateException(e);
        }
    }

    private void endJournal() {
        if (scanner != null) {
            scanner.close();
            scanner = null;
        }
    }

    /** PERMISSIVE: one row for the damage that ends a journal ({@code batches.corrupt_batch}). */
    private ColumnarBatch corruptRow(CorruptFileException e) {
        ColumnVector[] cols = new ColumnVector[fields.length];
        for (int c = 0; c < fields.length; c++) {
            String name = fields[c].name();
            WritableColumnVector v = new OnHeapColumnVector(1, fields[c].dataType());
            String text = name.equals("journal") ? journal.toString() : name.equals(ScanParts.CORRUPT) ? e.damageText() : null;
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

    @Override
    public ColumnarBatch get() {
        return current;
    }

    @Override
    public void close() {
        endJournal();
    }
}
