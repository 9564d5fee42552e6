package engine.spark;

import org.apache.hadoop.conf.Configuration;

/**
 * The JVM stream journal decoder without Spark, for the parity tests: {@code java -cp ...
 * engine.spark.StreamDump <file>} prints one line per stream ({@code STREAM number
 * hex(ident) start_offset status position hex(data)}), then {@code ANOMALY <text>} lines,
 * then {@code END position clean reason|next_global|records}; or
 * {@code ERROR <type>: <message>} for a damaged or foreign file.
 */
public final class StreamDump {
    private StreamDump() {
    }

    public static void main(String[] args) {
        StringBuilder out = new StringBuilder();
        Hfs fs = new Hfs(new Configuration());
        try {
            StreamCodec.Scan s = StreamCodec.scan(fs.readAll(args[0]), args[0]);
            for (StreamCodec.Stream st : s.streams) {
                out.append("STREAM ").append(st.number).append(' ')
                    .append(StreamCodec.hex(st.ident, 0, st.ident.length, "")).append(' ')
                    .append(st.startOffset).append(' ').append(st.status).append(' ').append(st.position).append(' ')
                    .append(StreamCodec.hex(st.data, 0, st.data.length, "")).append('\n');
            }
            for (String a : s.anomalies) {
                out.append("ANOMALY ").append(a).append('\n');
            }
            out.append("END ").append(s.position).append(' ').append(s.clean ? "True" : "False").append(' ')
                .append(s.reason).append('|').append(s.nextGlobal).append('|').append(s.records).append('\n');
        } catch (CorruptFileException e) {
            out.append("ERROR ").append(e.typeName()).append(": ").append(e.getMessage()).append('\n');
        }
        System.out.print(out);
        System.out.flush();
    }
}
