package engine.spark;

import java.util.HashMap;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The JVM reader without Spark, for the parity tests: {@code java -cp ... engine.spark.LogDump
 * key=value ...} plans and reads as the connector does and prints one line per row
 * ({@code log segment index time_ns flags hex(data) corrupt}), or {@code ERROR <type>: <message>}.
 */
public final class LogDump {
    private LogDump() {
    }

    public static void main(String[] args) {
        Map<String, String> opts = new HashMap<>();
        String columns = null;
        for (String a : args) {
            int eq = a.indexOf('=');
            if (a.startsWith("columns=")) {
                columns = a.substring(eq + 1);
            } else {
                opts.put(a.substring(0, eq), a.substring(eq + 1));
            }
        }
        StringBuilder out = new StringBuilder();
        try {
            LogOptions o = new LogOptions(opts);
            StructType schema = LogSource.fullSchema(o.permissive());
            if (columns != null) {
                java.util.List<String> keep = java.util.Arrays.asList(columns.split(","));
                schema = new StructType(java.util.Arrays.stream(schema.fields())
                    .filter(f -> keep.contains(f.name()) || f.name().equals(LogBatchReader.CORRUPT))
                    .toArray(org.apache.spark.sql.types.StructField[]::new));
            }
            Hfs fs = new Hfs(new Configuration());
            LogSource.LogScan scan = new LogSource.LogScan(schema, o, fs);
            for (LogPlan.Part p : scan.parts()) {
                LogBatchReader r = new LogBatchReader(fs.fresh(), p, schema, o.mode, o.batchRecords, null);
                try {
                    while (r.next()) {
                        ColumnarBatch b = r.get();
                        for (int i = 0; i < b.numRows(); i++) {
                            row(out, schema, b, i);
                        }
                    }
                } finally {
                    r.close();
                }
            }
        } catch (CorruptFileException e) {
            out.append("ERROR ").append(e.typeName()).append(": ").append(e.getMessage()).append('\n');
        } catch (ConfigException e) {
            out.append("ERROR ConfigError: ").append(e.getMessage()).append('\n');
        }
        System.out.print(out);
        System.out.flush();
    }

    private static void row(StringBuilder out, StructType schema, ColumnarBatch b, int i) {
        String[] names = schema.fieldNames();
        for (int c = 0; c < names.length; c++) {
            ColumnVector v = b.column(c);
            if (c > 0) {
                out.append('\t');
            }
            if (v.isNullAt(i)) {
                out.append("None");
                continue;
            }
            switch (names[c]) {
                case "log":
                case LogBatchReader.CORRUPT:
                    out.append(v.getUTF8String(i).toString());
                    break;
                case "data":
                    for (byte x : v.getBinary(i)) {
                        out.append(String.format("%02x", x & 0xFF));
                    }
                    break;
                default:
                    out.append(v.getLong(i));
            }
        }
        out.append('\n');
    }
}
