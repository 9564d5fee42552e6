package engine.spark;

import org.apache.hadoop.conf.Configuration;

/**
 * The JVM stream journal decoder without Spark, for the parity tests: {@code java -cp ...
 * engine.spark.StreamDump <file> [window...]} prints one line per stream ({@code STREAM number
 * hex(ident) start_offset status position hex(data)}) as {@link StreamScanner} gives them,
 * then {@code ANOMALY <text>} lines, then {@code END position clean reason|next_global|records};
 * or, where the scan raised, {@code ERROR <type>: <message>} after the streams before it.
 * With windows (bytes; default {@link StreamScanner#WINDOW}), the file is read through each in
 * turn, each dump after a {@code WINDOW <bytes>} line: the tests read every case through
 * windows smaller than a record in one JVM.
 */
public final class StreamDump {
    private StreamDump() {
    }

    public static void main(String[] args) {
        StringBuilder out = new StringBuilder();
        if (args.length == 1) {
            dump(args[0], StreamScanner.WINDOW, out);
        }
        for (int i = 1; i < args.length; i++) {
            out.append("WINDOW ").append(args[i]).append('\n');
            dump(args[0], Integer.parseInt(args[i]), out);
        }
        DumpMain.print(out);
    }

    private static void dump(String path, int window, StringBuilder out) {
        try (StreamScanner s = new StreamScanner(new Hfs(new Configuration()), path, window, true, true)) {
            for (StreamCodec.Stream st = s.next(); st != null; st = s.next()) {
                out.append("STREAM ").append(st.number).append(' ')
                    .append(StreamCodec.hex(st.ident, 0, st.ident.length, "")).append(' ')
                    .append(st.startOffset).append(' ').append(st.status).append(' ').append(st.position).append(' ')
                    .append(StreamCodec.hex(st.data, 0, st.data.length, "")).append('\n');
            }
            for (String a : s.anomalies) {
                out.append("ANOMALY ").append(a).append('\n');
            }
            out.append("END ").append(s.endPosition).append(' ').append(s.clean ? "True" : "False").append(' ')
                .append(s.reason).append('|').append(s.nextGlobal()).append('|').append(s.records()).append('\n');
        } catch (CorruptFileException e) {
            DumpMain.error(out, e.typeName(), e.getMessage());
        }
    }
}
