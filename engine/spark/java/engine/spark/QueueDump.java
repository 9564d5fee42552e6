package engine.spark;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Paths;

/**
 * The JVM queue file decoder without Spark, for the parity tests: {@code java -cp ...
 * engine.spark.QueueDump journal=PATH ... reader=PATH ...} decodes each file as the connector does
 * ({@link QueueFiles}) and prints, per item of the journal files (read in the order given, as one
 * journal: ids must increase across them) {@code id add_time expire_time|None error_count hex(data)},
 * per reader file {@code head H} and {@code done id,id,...}, or {@code ERROR <type>: <message>} (the
 * files after an error are not read). Several dumps in one JVM: arguments and outputs separated by
 * {@code --}.
 */
public final class QueueDump {
    private QueueDump() {
    }

    public static void main(String[] args) throws IOException {
        StringBuilder out = new StringBuilder();
        long[] last = {0};
        java.util.List<String> read = null;  // a source read's options, when the dump is one
        for (String a : args) {
            if (read != null && !a.equals("--")) {
                read.add(a);
                continue;
            }
            if (a.equals("read")) {
                read = new java.util.ArrayList<>();
                continue;
            }
            if (a.equals("--") && read != null) {
                source(read, out);
                read = null;
                out.append("--\n");
                continue;
            }
            if (a.equals("--")) {
                out.append("--\n");
                last[0] = 0;
                continue;
            }
            if (last[0] < 0) {
                continue; // an error ended this dump
            }
            int eq = a.indexOf('=');
            String kind = a.substring(0, eq);
            String path = a.substring(eq + 1);
            try {
                byte[] data = Files.readAllBytes(Paths.get(path));
                if (kind.equals("journal")) {
                    QueueFiles.readJournal(path, data, data.length, last[0], -1, (c, before) -> {
                        for (int k = 0; k < c.items; k++) {
                            out.append(c.ids[k]).append('\t').append(c.addTimes[k]).append('\t')
                                .append(c.hasExpiry[k] ? Long.toString(c.expireTimes[k]) : "None").append('\t')
                                .append(c.errorCounts[k]).append('\t');
                            hex(out, data, c.dataAt[k], c.dataLen[k]);
                            out.append('\n');
                        }
                        last[0] = c.ids[c.items - 1];
                        return true;
                    });
                } else {
                    QueueCodec.ReaderFile r = QueueFiles.readReader(path, data, data.length);
                    out.append("head\t").append(r.head).append('\n').append("done\t");
                    for (int k = 0; k < r.done.length; k++) {
                        out.append(k > 0 ? "," : "").append(r.done[k]);
                    }
                    out.append('\n');
                }
            } catch (CorruptFileException e) {
                out.append("ERROR ").append(e.typeName()).append(": ").append(e.getMessage()).append('\n');
                last[0] = -1;
            }
        }
        if (read != null) {
            source(read, out);
        }
        System.out.print(out);
        System.out.flush();
    }

    /**
     * {@code read key=value ... [columns=a,b]}: plans and reads as the source does, one line per row
     * (the columns tab-separated: timestamps in microseconds, data in hex, nulls as None).
     */
    private static void source(java.util.List<String> args, StringBuilder out) {
        java.util.Map<String, String> opts = new java.util.HashMap<>();
        String columns = null;
        for (String a : args) {
            int eq = a.indexOf('=');
            if (a.startsWith("columns=")) {
                columns = a.substring(eq + 1);
            } else {
                opts.put(a.substring(0, eq), a.substring(eq + 1));
            }
        }
        try {
            QueueOptions o = new QueueOptions(opts);
            org.apache.spark.sql.types.StructType schema = QueueSource.fullSchema(o.permissive());
            if (columns != null) {
                java.util.List<String> keep = java.util.Arrays.asList(columns.split(","));
                schema = new org.apache.spark.sql.types.StructType(java.util.Arrays.stream(schema.fields())
                    .filter(f -> keep.contains(f.name()) || f.name().equals(QueueBatchReader.CORRUPT))
                    .toArray(org.apache.spark.sql.types.StructField[]::new));
            }
            Hfs fs = new Hfs(new org.apache.hadoop.conf.Configuration());
            for (QueuePlan.Part p : QueuePlan.plan(fs, o.inputPaths(fs), o)) {
                QueueBatchReader r = new QueueBatchReader(fs.fresh(), p, schema, o.mode);
                try {
                    while (r.next()) {
                        org.apache.spark.sql.vectorized.ColumnarBatch b = r.get();
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
    }

    private static void row(StringBuilder out, org.apache.spark.sql.types.StructType schema,
                            org.apache.spark.sql.vectorized.ColumnarBatch b, int i) {
        String[] names = schema.fieldNames();
        for (int c = 0; c < names.length; c++) {
            org.apache.spark.sql.vectorized.ColumnVector v = b.column(c);
            if (c > 0) {
                out.append('\t');
            }
            if (v.isNullAt(i)) {
                out.append("None");
            } else if (names[c].equals("id") || names[c].endsWith("_time")) {
                out.append(v.getLong(i));
            } else if (names[c].equals("error_count")) {
                out.append(v.getInt(i));
            } else if (names[c].equals("data")) {
                out.append(Py.hex(v.getBinary(i)));
            } else {
                out.append(v.getUTF8String(i).toString());
            }
        }
        out.append('\n');
    }

    private static void hex(StringBuilder out, byte[] b, int at, int len) {
        final String digits = "0123456789abcdef";
        for (int k = at; k < at + len; k++) {
            out.append(digits.charAt((b[k] >> 4) & 0xf)).append(digits.charAt(b[k] & 0xf));
        }
    }
}
