package engine.spark;

import java.nio.charset.StandardCharsets;
import java.util.List;

import org.apache.spark.sql.connector.read.PartitionReader;
import org.apache.spark.sql.execution.vectorized.ConstantColumnVector;
import org.apache.spark.sql.execution.vectorized.OnHeapColumnVector;
import org.apache.spark.sql.execution.vectorized.WritableColumnVector;
import org.apache.spark.sql.types.DataTypes;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;
import org.apache.spark.unsafe.types.UTF8String;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * Reads one {@link LogPlan.Part} as columnar batches, one per run of {@code batchRecords}
 * records (the runs of the Python reader, so both report the same first problem): the IDX
 * entries, the LOG bytes they cover and the CRCs, decoded by {@link LogCodec}; only the
 * columns of the read schema are built, and a schema of IDX columns only never reads the
 * LOG ({@code logplan.read_partition}).  {@code mode} as {@code logplan.run_to_batch} and
 * {@code batches.guarded}.
 */
public final class LogBatchReader implements PartitionReader<ColumnarBatch> {
    private static final Logger LOG = LoggerFactory.getLogger("engine.spark");
    static final List<String> INDEX_COLUMNS = List.of("log", "segment", "index", "time", "time_ns");
    static final String CORRUPT = "_corrupt_record";

    private final Hfs fs;
    private final LogPlan.Part part;
    private final StructType schema;
    private final String mode;
    private final int batchRecords;
    private final LogPlan.Bounds bounds;
    private final boolean indexOnly;
    private final boolean payload;
    private long pos;
    private Long prevOffset;
    private Long prevTime;
    private boolean crcChecked;
    private boolean done;
    private ColumnarBatch current;
    /** The decoded run being served in slices of {@link #SLICE} rows, its selected rows and the next one. */
    private LogCodec.Run pending;
    private String[] pendingNotes;
    private int[] rows;
    private int selected;
    private int cursor;
    private WritableColumnVector[] vectors;
    private ConstantColumnVector[] constants;
    /**
     * Rows per columnar batch: a run (batchRecords, the unit of reading and checking) is
     * handed to Spark in slices this size, as Parquet's reader does (4096 rows,
     * spark.sql.parquet.columnarReaderBatchSize), so a batch's vectors stay in the CPU
     * caches while Spark turns them into rows.
     */
    static final int SLICE = 4096;

    public LogBatchReader(Hfs fs, LogPlan.Part part, StructType schema, String mode, int batchRecords,
                          LogPlan.Bounds bounds) {
        this.fs = fs;
        this.part = part;
        this.schema = schema;
        this.mode = mode;
        this.batchRecords = batchRecords;
        this.bounds = bounds;
        boolean idx = true;
        boolean data = false;
        for (String name : schema.fieldNames()) {
            if (!name.equals(CORRUPT) && !INDEX_COLUMNS.contains(name)) {
                idx = false;
            }
            data |= name.equals("data");
        }
        // DROPMALFORMED and PERMISSIVE answer from the records (a damaged one is dropped or
        // marked), so only FAILFAST reads of IDX columns skip the LOG.
        this.indexOnly = idx && mode.equals("FAILFAST");
        this.payload = data;
        this.pos = part.start;
    }

    @Override
    public boolean next() {
        if (pending != null) {
            current = slice();
            return true;
        }
        while (!done && pos < part.stop) {
            try {
                ColumnarBatch b = indexOnly ? indexRun() : recordRun();
                if (b != null) {
                    current = b;
                    return true;
                }
            } catch (CorruptFileException e) {
                done = true;
                if (mode.equals("FAILFAST")) {
                    throw e;
                }
                if (mode.equals("DROPMALFORMED")) {
                    LOG.warn("{}: damaged, the rest is left out: {}", part.segment.logPath, e.getMessage());
                    return false;
                }
                current = corruptRow(e);
                return true;
            }
        }
        return false;
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

    private ColumnarBatch indexRun() {
        LogSegments.Segment seg = part.segment;
        int n = (int) Math.min(batchRecords, part.stop - pos);
        long idxOff = LogCodec.HEADER_SIZE + LogCodec.ENTRY_SIZE * pos;
        byte[] raw = seg.readIdx(fs, idxOff, LogCodec.ENTRY_SIZE * n);
        int got = raw.length / LogCodec.ENTRY_SIZE;
        if (got < n) {
            throw new CorruptFileException(seg.idxPath, idxOff + (long) LogCodec.ENTRY_SIZE * got,
                "an index entry (the file shrank while being read)", null);
        }
        LogCodec.Run run = LogCodec.decodeIndexRun(raw, n, seg.idxPath, seg.firstIndex + pos, idxOff, seg.endOffset,
            prevOffset, prevTime);
        prevOffset = run.lastOffset;
        prevTime = run.time[n - 1];
        pos += n;
        return build(run, null, null);
    }

    private ColumnarBatch recordRun() {
        LogSegments.Segment seg = part.segment;
        if (seg.hasCrc && !crcChecked) {
            LogCodec.checkHeader(fs.readAt(seg.crcPath, 0, LogCodec.HEADER_SIZE), "CRC", seg.crcPath);
            crcChecked = true;
        }
        int n = (int) Math.min(batchRecords, part.stop - pos);
        long idxOff = LogCodec.HEADER_SIZE + LogCodec.ENTRY_SIZE * pos;
        int extra = pos + n < seg.count ? 1 : 0;
        byte[] raw = seg.readIdx(fs, idxOff, LogCodec.ENTRY_SIZE * (n + extra));
        int got = raw.length / LogCodec.ENTRY_SIZE;
        if (got < n + extra) {
            throw new CorruptFileException(seg.idxPath, idxOff + (long) LogCodec.ENTRY_SIZE * got,
                "an index entry (the file shrank while being read)", null);
        }
        long base = LogCodec.i64(raw, 16);
        long end = extra == 1 ? LogCodec.i64(raw, LogCodec.ENTRY_SIZE * n + 16) : seg.endOffset;
        if (!(LogCodec.HEADER_SIZE <= base && base < seg.endOffset)) {
            throw new CorruptFileException(seg.idxPath, idxOff + 16,
                "a log offset in [" + LogCodec.HEADER_SIZE + ", " + seg.endOffset + ")", Long.toString(base));
        }
        if (!(base < end && end <= seg.endOffset)) {
            throw new CorruptFileException(seg.idxPath, idxOff + (long) LogCodec.ENTRY_SIZE * n + 16,
                "a log offset in (" + base + ", " + seg.endOffset + "]", Long.toString(end));
        }
        if (end - base > LogCodec.MAX_BATCH_BYTES) {
            throw new ConfigException(seg.logPath + ": a batch of " + (end - base) + " bytes is too large; use smaller batches");
        }
        byte[] log = fs.readAt(seg.logPath, base, (int) (end - base));
        byte[] crcs = null;
        if (seg.hasCrc) {
            long crcOff = LogCodec.HEADER_SIZE + (long) LogCodec.CRC_SIZE * pos;
            crcs = fs.readAt(seg.crcPath, crcOff, LogCodec.CRC_SIZE * n);
            if (crcs.length < LogCodec.CRC_SIZE * n) {
                throw new CorruptFileException(seg.crcPath, crcOff + crcs.length, n + " checksums", "end of file");
            }
        }
        LogCodec.Run run = LogCodec.decodeRun(log, log.length, base, raw, n, seg.logPath, seg.firstIndex + pos, idxOff,
            crcs);
        pos += n;
        String[] notes = null;
        boolean[] drop = null;
        if (run.bad.length > 0) {
            int first = run.bad[0];
            if (mode.equals("FAILFAST")) {
                throw new CorruptFileException(seg.logPath, base + run.at[first],
                    "record " + (run.firstIndex + first) + " matching its checksum (" + seg.crcPath + ")",
                    "a record that does not");
            }
            if (mode.equals("DROPMALFORMED")) {
                LOG.warn("{}: {} record(s) failing their checksum left out (first: {})", seg.logPath, run.bad.length,
                    new CorruptFileException(seg.logPath, base + run.at[first],
                        "record " + (run.firstIndex + first) + " matching its checksum (" + seg.crcPath + ")",
                        "a record that does not").getMessage());
                drop = new boolean[n];
                for (int i : run.bad) {
                    drop[i] = true;
                }
            } else {
                notes = new String[n];
                for (int i : run.bad) {
                    notes[i] = new CorruptFileException(seg.logPath, base + run.at[i],
                        "record " + (run.firstIndex + i) + " matching its checksum", "a record that does not").getMessage();
                }
            }
        }
        return build(run, notes, drop);
    }

    private WritableColumnVector vector(int capacity, org.apache.spark.sql.types.DataType type) {
        return new OnHeapColumnVector(Math.max(capacity, 1), type);
    }

    /** Selects {@code run}'s rows that pass the time bounds (and are not dropped); the first slice, or null. */
    private ColumnarBatch build(LogCodec.Run run, String[] notes, boolean[] drop) {
        int n = run.n;
        int[] keep = new int[n];
        int m = 0;
        boolean filter = bounds != null && (bounds.timeLo != null || bounds.timeHi != null);
        for (int i = 0; i < n; i++) {
            if ((drop == null || !drop[i]) && (!filter || bounds.keepsTime(run.time[i]))) {
                keep[m++] = i;
            }
        }
        if (m == 0) {
            return null;
        }
        pending = run;
        pendingNotes = notes;
        rows = keep;
        selected = m;
        cursor = 0;
        return slice();
    }

    /** The next {@link #SLICE} selected rows of the pending run, in vectors reused from batch to batch. */
    private ColumnarBatch slice() {
        LogCodec.Run run = pending;
        int from = cursor;
        int m = Math.min(SLICE, selected - from);
        cursor += m;
        if (cursor >= selected) {
            pending = null;
        }
        StructField[] fields = schema.fields();
        if (vectors == null) {
            vectors = new WritableColumnVector[fields.length];
            constants = new ConstantColumnVector[fields.length];
        }
        ColumnVector[] cols = new ColumnVector[fields.length];
        LogSegments.Segment seg = part.segment;
        for (int c = 0; c < fields.length; c++) {
            String name = fields[c].name();
            if (name.equals("log") || name.equals("segment")) {
                ConstantColumnVector v = new ConstantColumnVector(m, fields[c].dataType());
                if (name.equals("log")) {
                    v.setUtf8String(UTF8String.fromString(part.logName));
                } else {
                    v.setLong(seg.firstIndex);
                }
                cols[c] = v;
                continue;
            }
            if (vectors[c] == null) {
                vectors[c] = vector(SLICE, fields[c].dataType());
            }
            WritableColumnVector v = vectors[c];
            v.reset();
            cols[c] = v;
            switch (name) {
                case "index":
                    for (int r = 0; r < m; r++) {
                        v.putLong(r, run.firstIndex + rows[from + r]);
                    }
                    break;
                case "time":
                    for (int r = 0; r < m; r++) {
                        v.putLong(r, Math.floorDiv(run.time[rows[from + r]], 1000L));
                    }
                    break;
                case "time_ns":
                    for (int r = 0; r < m; r++) {
                        v.putLong(r, run.time[rows[from + r]]);
                    }
                    break;
                case "flags":
                    for (int r = 0; r < m; r++) {
                        v.putLong(r, run.flags[rows[from + r]]);
                    }
                    break;
                case "data": {
                    long total = 0;
                    for (int r = 0; r < m; r++) {
                        total += run.size[rows[from + r]];
                    }
                    v.arrayData().reserve((int) Math.min(Integer.MAX_VALUE - 8, total));
                    for (int r = 0; r < m; r++) {
                        int i = rows[from + r];
                        v.putByteArray(r, run.buf, run.at[i] + LogCodec.RECORD_HEADER_SIZE, run.size[i]);
                    }
                    break;
                }
                case CORRUPT:
                    for (int r = 0; r < m; r++) {
                        String note = pendingNotes == null ? null : pendingNotes[rows[from + r]];
                        if (note == null) {
                            v.putNull(r);
                        } else {
                            byte[] b = note.getBytes(StandardCharsets.UTF_8);
                            v.putByteArray(r, b, 0, b.length);
                        }
                    }
                    break;
                default:
                    throw new ConfigException("engine-log has no column '" + name + "'");
            }
        }
        ColumnarBatch batch = new ColumnarBatch(cols);
        batch.setNumRows(m);
        return batch;
    }

    /** PERMISSIVE: one row for damage that ends the partition ({@code batches.corrupt_batch}). */
    private ColumnarBatch corruptRow(CorruptFileException e) {
        StructField[] fields = schema.fields();
        ColumnVector[] cols = new ColumnVector[fields.length];
        for (int c = 0; c < fields.length; c++) {
            String name = fields[c].name();
            WritableColumnVector v = vector(1, fields[c].dataType());
            if (name.equals("log")) {
                byte[] b = part.logName.getBytes(StandardCharsets.UTF_8);
                v.putByteArray(0, b, 0, b.length);
            } else if (name.equals("segment")) {
                v.putLong(0, part.segment.firstIndex);
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
