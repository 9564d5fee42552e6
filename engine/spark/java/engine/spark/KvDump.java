package engine.spark;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashMap;
import java.util.List;
import java.util.Map;

import org.apache.hadoop.conf.Configuration;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.vectorized.ColumnVector;
import org.apache.spark.sql.vectorized.ColumnarBatch;

/**
 * The JVM key-value reader without Spark, for the parity tests: {@code java -cp ...
 * engine.spark.KvDump key=value ... [columns=a,b]} plans and reads as the connector does and
 * prints one line per row (the columns tab-separated: strings as they are, {@code key} and
 * {@code value} in hex, nulls as {@code None}), or
 * {@code ERROR <type>: <message>}.  Several reads in one JVM: their arguments separated by
 * {@code --}, their output by {@code --} lines.
 */
public final class KvDump {
    private KvDump() {
    }

    public static void main(String[] args) {
        List<String> one = new ArrayList<>();
        StringBuilder out = new StringBuilder();
        for (String a : args) {
            if (a.equals("--")) {
                dump(one.toArray(new String[0]), out);
                out.append("--\n");
                one.clear();
            } else {
                one.add(a);
            }
        }
        dump(one.toArray(new String[0]), out);
        System.out.print(out);
        System.out.flush();
    }

    private static void dump(String[] args, StringBuilder out) {
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
        try {
            KvSource.Options o = new KvSource.Options(opts);
            StructType schema = KvSource.fullSchema(o.permissive());
            if (columns != null) {
                List<String> keep = Arrays.asList(columns.split(","));
                schema = new StructType(Arrays.stream(schema.fields())
                    .filter(f -> keep.contains(f.name()) || f.name().equals(ScanParts.CORRUPT))
                    .toArray(StructField[]::new));
            }
            Hfs fs = new Hfs(new Configuration());
            List<String> paths = o.inputPaths(fs);
            for (KvSource.Part p : KvSource.plan(fs, paths, o, new KvSource.Bounds(o)).parts) {
                KvBatchReader r = new KvBatchReader(fs.fresh(), p, schema, o.mode);
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
        } catch (PageException e) {
            out.append("ERROR PageError: ").append(e.getMessage()).append('\n');
        } catch (RecoveryNeededException e) {
            out.append("ERROR RecoveryNeededError: ").append(e.getMessage()).append('\n');
        } catch (ConfigException e) {
            out.append("ERROR ConfigError: ").append(e.getMessage()).append('\n');
        } catch (java.io.UncheckedIOException e) {
            String type = e.getCause() instanceof java.io.FileNotFoundException ? "FileNotFoundError" : "OSError";
            out.append("ERROR ").append(type).append(": ").append(e.getCause().getMessage()).append('\n');
        }
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
            } else if (names[c].equals("key") || names[c].equals("value")) {
                out.append(Py.hex(v.getBinary(i)));
            } else {
                out.append(v.getUTF8String(i).toString());
            }
        }
        out.append('\n');
    }
}
