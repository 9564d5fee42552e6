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
 * files after an error are not read). {@code read key=value ... [columns=a,b]} instead reads as the
 * source does and prints its rows ({@link DumpMain}). Several dumps in one JVM: arguments and outputs
 * separated by {@code --}.
 */
public final class QueueDump {
    /** {@code read key=value ... [columns=a,b]}: the source's plan and batch reader ({@link DumpMain}). */
    private static final DumpMain.Format<QueueOptions, QueuePlan.Part> SOURCE = new DumpMain.Format<>(
        QueueOptions::new, o -> QueueSource.fullSchema(o.permissive()),
        (fs, o, schema) -> QueuePlan.plan(fs, o.inputPaths(fs), o),
        (fs, p, schema, o) -> new QueueBatchReader(fs.fresh(), p, schema, o.mode));

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
                DumpMain.read(read, SOURCE, out);
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
                DumpMain.error(out, e.typeName(), e.getMessage());
                last[0] = -1;
            }
        }
        if (read != null) {
            DumpMain.read(read, SOURCE, out);
        }
        DumpMain.print(out);
    }

    private static void hex(StringBuilder out, byte[] b, int at, int len) {
        final String digits = "0123456789abcdef";
        for (int k = at; k < at + len; k++) {
            out.append(digits.charAt((b[k] >> 4) & 0xf)).append(digits.charAt(b[k] & 0xf));
        }
    }
}
