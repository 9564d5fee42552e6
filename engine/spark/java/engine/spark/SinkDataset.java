package engine.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardCopyOption;
import java.nio.file.StandardOpenOption;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashSet;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import com.fasterxml.jackson.core.io.JsonStringEncoder;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import org.apache.hadoop.conf.Configuration;

/**
 * The shard/commit/abort protocol of the engine-log sink on the driver (the JVM port of
 * engine/spark/sink.py's commit side; docs/pipeline.md describes the layout):
 *
 * <pre>
 *   DATASET/_SHARDS.json   manifest: {"version": 1, "shards": ["job-&lt;id&gt;/shard-...", ...], ...}
 *   DATASET/_LOCK          record-locked (fcntl, byte 0) while a job commits or cleans up
 *   DATASET/job-&lt;id&gt;/shard-&lt;...&gt;/   one append log per task
 * </pre>
 *
 * The manifest's replacement (temp file, fsync, rename, fsync directory) under the lock is
 * the single publication point: readers see the old list of shards or the new one, never
 * part of a job.  What it no longer lists (replaced jobs, failed task attempts) is deleted
 * after it.  No directory is renamed.  Local paths only: the protocol fsyncs directories
 * and locks a file, which Hadoop's FileSystem API does not offer.
 */
final class SinkDataset {
    static final String MANIFEST = LogSegments.MANIFEST;
    static final String LOCK = "_LOCK";
    static final String JOB_PREFIX = "job-";

    private SinkDataset() {
    }

    static UncheckedIOException io(Path p, String what, IOException e) {
        return new UncheckedIOException(p + ": " + what + " (" + e + ")", e);
    }

    /** fsync a directory (its entries: created, renamed or deleted names). */
    static void fsyncDir(Path dir) {
        try (FileChannel ch = FileChannel.open(dir, StandardOpenOption.READ)) {
            ch.force(true);
        } catch (IOException e) {
            throw io(dir, "cannot fsync the directory", e);
        }
    }

    /** mkdir -p that fsyncs the parent of each directory it creates (engine.fs.make_dirs). */
    static void makeDirs(Path dir) {
        if (Files.isDirectory(dir)) {
            return;
        }
        Path parent = dir.toAbsolutePath().getParent();
        if (parent != null) {
            makeDirs(parent);
        }
        try {
            Files.createDirectory(dir);
        } catch (java.nio.file.FileAlreadyExistsException e) {
            return;
        } catch (IOException e) {
            throw io(dir, "cannot create the directory", e);
        }
        if (parent != null) {
            fsyncDir(parent);
        }
    }

    static List<String> list(Path dir) {
        List<String> out = new ArrayList<>();
        try (DirectoryStream<Path> ds = Files.newDirectoryStream(dir)) {
            for (Path p : ds) {
                out.add(p.getFileName().toString());
            }
        } catch (NoSuchFileException e) {
            return out;
        } catch (IOException e) {
            throw io(dir, "cannot list the directory", e);
        }
        Collections.sort(out);
        return out;
    }

    /** Delete a directory and everything under it. */
    static void removeTree(Path p) {
        if (Files.isDirectory(p, LinkOption.NOFOLLOW_LINKS)) {
            for (String n : list(p)) {
                removeTree(p.resolve(n));
            }
        }
        try {
            Files.deleteIfExists(p);
        } catch (IOException e) {
            throw io(p, "cannot delete", e);
        }
    }

    /** The dataset directory of a write: one local path (engine.spark.options.one_path). */
    static Path localPath(String path) {
        String abs = LogOptions.absolute(path);
        if (abs.matches("^[A-Za-z][A-Za-z0-9+.-]*:.*")) {
            throw new ConfigException(LogOptions.SOURCE + ": " + path + ": the sink writes local (or mounted) paths "
                + "only: its commit fsyncs directories and locks the manifest, which Hadoop file systems do not offer");
        }
        return Paths.get(abs);
    }

    /** sink.check_target: ConfigError unless the path is a sink dataset, new, or empty. */
    static void checkTarget(Path dataset) {
        if (!Files.exists(dataset)) {
            return;
        }
        if (!Files.isDirectory(dataset)) {
            throw new ConfigException(dataset + ": not a directory; the engine-log sink writes a dataset directory");
        }
        List<String> names = list(dataset);
        if (names.contains(MANIFEST)) {
            return;
        }
        for (String n : names) {
            if (LogSegments.SEGMENT_RE.matcher(n).matches()) {
                throw new ConfigException(dataset + ": a plain append log (it has log segments and no " + MANIFEST
                    + "); the engine-log sink writes datasets of shards, which would hide this log's records: write "
                    + "to a new directory, or append to the log with engine.applog.AppendLog");
            }
        }
        List<String> other = new ArrayList<>();
        for (String n : names) {
            if (!n.equals(LOCK) && !n.startsWith(JOB_PREFIX)) {
                other.add(n);
            }
        }
        if (!other.isEmpty()) {
            throw new ConfigException(dataset + ": not an engine-log sink dataset (no " + MANIFEST + ") and not empty ("
                + String.join(", ", other.subList(0, Math.min(5, other.size()))) + "); the sink's manifest would hide "
                + "what is there: write to a new or empty directory");
        }
    }

    /** The manifest's document, or null when there is none (errors as LogSegments.readManifest). */
    static JsonNode readDocument(Path dataset) {
        Hfs fs = new Hfs(new Configuration(false));
        if (LogSegments.readManifest(fs, dataset.toString()) == null) {
            return null;  // also checked: a corrupt manifest is a CorruptFileException naming it
        }
        try {
            return new ObjectMapper().readTree(Files.readAllBytes(dataset.resolve(MANIFEST)));
        } catch (IOException e) {
            throw io(dataset.resolve(MANIFEST), "cannot read the manifest", e);
        }
    }

    static List<String> shards(JsonNode doc) {
        List<String> out = new ArrayList<>();
        if (doc != null) {
            for (JsonNode s : doc.get("shards")) {
                out.add(s.asText());
            }
        }
        return out;
    }

    static Map<String, Long> streams(JsonNode doc) {
        Map<String, Long> out = new LinkedHashMap<>();
        JsonNode s = doc == null ? null : doc.get("streams");
        if (s != null && s.isObject()) {
            Iterator<Map.Entry<String, JsonNode>> it = s.fields();
            while (it.hasNext()) {
                Map.Entry<String, JsonNode> e = it.next();
                out.put(e.getKey(), e.getValue().asLong());
            }
        }
        return out;
    }

    private static String quote(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char c : s.toCharArray()) {
            if (c > 0x7f) {
                b.append(String.format("\\u%04x", (int) c));  // json.dumps' ensure_ascii
            } else {
                b.append(JsonStringEncoder.getInstance().quoteAsString(String.valueOf(c)));
            }
        }
        return b.append('"').toString();
    }

    /** The manifest as Python's {@code json.dumps(doc, indent=1)} writes it, plus a newline. */
    static byte[] manifestBytes(List<String> shards, long committedNs, Map<String, Long> streams) {
        StringBuilder b = new StringBuilder("{\n \"version\": 1,\n \"shards\": ");
        if (shards.isEmpty()) {
            b.append("[]");
        } else {
            b.append("[\n");
            for (int i = 0; i < shards.size(); i++) {
                b.append("  ").append(quote(shards.get(i))).append(i + 1 < shards.size() ? ",\n" : "\n");
            }
            b.append(" ]");
        }
        b.append(",\n \"committed_ns\": ").append(committedNs);
        if (streams != null) {
            b.append(",\n \"streams\": ");
            if (streams.isEmpty()) {
                b.append("{}");
            } else {
                b.append("{\n");
                int i = 0;
                for (Map.Entry<String, Long> e : streams.entrySet()) {
                    b.append("  ").append(quote(e.getKey())).append(": ").append(e.getValue())
                        .append(++i < streams.size() ? ",\n" : "\n");
                }
                b.append(" }");
            }
        }
        return b.append("\n}\n").toString().getBytes(StandardCharsets.UTF_8);
    }

    static long nowNs() {
        java.time.Instant t = java.time.Instant.now();
        return t.getEpochSecond() * 1_000_000_000L + t.getNano();
    }

    /** Replace the manifest: temp file, fsync, rename over it, fsync the directory. */
    static void writeManifest(Path dataset, byte[] data) {
        Path tmp = dataset.resolve(MANIFEST + ".tmp");
        Path dst = dataset.resolve(MANIFEST);
        try (FileChannel ch = FileChannel.open(tmp, StandardOpenOption.CREATE, StandardOpenOption.WRITE,
                StandardOpenOption.TRUNCATE_EXISTING)) {
            ByteBuffer buf = ByteBuffer.wrap(data);
            while (buf.hasRemaining()) {
                ch.write(buf);
            }
            ch.force(true);
        } catch (IOException e) {
            throw io(tmp, "cannot write the new manifest", e);
        }
        try {
            Files.move(tmp, dst, StandardCopyOption.ATOMIC_MOVE, StandardCopyOption.REPLACE_EXISTING);
        } catch (IOException e) {
            throw io(dst, "cannot replace the manifest", e);
        }
        fsyncDir(dataset);
    }

    static String listedName(LogSink.ShardCommit c) {
        return JOB_PREFIX + c.jobId + "/" + c.shard;
    }

    /** sink.commit_job: publish a job's shards (append: added; overwrite: only them). */
    static List<String> commitJob(Path dataset, List<LogSink.ShardCommit> commits, boolean overwrite) {
        checkTarget(dataset);
        makeDirs(dataset);
        try (SinkLock held = SinkLock.take(dataset.resolve(LOCK).toString())) {
            JsonNode doc = readDocument(dataset);
            List<String> old = shards(doc);
            List<String> fresh = new ArrayList<>();
            for (LogSink.ShardCommit c : commits) {
                fresh.add(listedName(c));
            }
            Collections.sort(fresh);
            List<String> listed = new ArrayList<>(overwrite ? List.of() : old);
            for (String s : fresh) {
                if (!listed.contains(s)) {
                    listed.add(s);
                }
            }
            writeManifest(dataset, manifestBytes(listed, nowNs(), overwrite ? null : streams(doc)));
            // Published.  The rest is cleanup of what no manifest lists any more.
            Set<String> jobs = new HashSet<>();
            for (LogSink.ShardCommit c : commits) {
                jobs.add(c.jobId);
            }
            if (overwrite) {
                for (String s : old) {
                    jobs.add(s.split("/", 2)[0].substring(JOB_PREFIX.length()));
                }
            }
            removeUnlisted(dataset, new HashSet<>(listed), jobs);
            return listed;
        }
    }

    /** sink.commit_stream_batch: publish one micro-batch once per (stream, batch id). */
    static boolean commitStreamBatch(Path dataset, List<LogSink.ShardCommit> commits, String stream, long batchId) {
        checkTarget(dataset);
        makeDirs(dataset);
        try (SinkLock held = SinkLock.take(dataset.resolve(LOCK).toString())) {
            JsonNode doc = readDocument(dataset);
            Map<String, Long> streams = streams(doc);
            if (streams.getOrDefault(stream, -1L) >= batchId) {
                // Spark re-ran a batch the manifest already has: drop the re-run's shards.
                for (LogSink.ShardCommit c : commits) {
                    removeTree(dataset.resolve(listedName(c)));
                }
                fsyncDir(dataset);
                return false;
            }
            streams.put(stream, batchId);
            List<String> listed = new ArrayList<>(shards(doc));
            List<String> fresh = new ArrayList<>();
            for (LogSink.ShardCommit c : commits) {
                fresh.add(listedName(c));
            }
            Collections.sort(fresh);
            for (String s : fresh) {
                if (!listed.contains(s)) {
                    listed.add(s);
                }
            }
            writeManifest(dataset, manifestBytes(listed, nowNs(), streams));
            return true;
        }
    }

    /** sink.abort_shards: remove the given unpublished shards (a failed micro-batch's). */
    static void abortShards(Path dataset, List<LogSink.ShardCommit> commits) {
        Set<String> listed = new HashSet<>(shards(readDocument(dataset)));
        for (LogSink.ShardCommit c : commits) {
            if (!listed.contains(listedName(c))) {
                removeTree(dataset.resolve(listedName(c)));
            }
        }
    }

    /** sink.abort_job: remove everything a failed job wrote. */
    static void abortJob(Path dataset, String jobId) {
        Path job = dataset.resolve(JOB_PREFIX + jobId);
        if (!Files.exists(job)) {
            return;
        }
        for (String s : shards(readDocument(dataset))) {
            if (s.startsWith(JOB_PREFIX + jobId + "/")) {
                throw new ConfigException(dataset + ": job " + jobId + " is already committed; not removing it");
            }
        }
        removeTree(job);
        fsyncDir(dataset);
    }

    /** Delete shards of the given jobs (then empty job directories) the manifest does not list. */
    static void removeUnlisted(Path dataset, Set<String> listed, Set<String> jobs) {
        boolean changed = false;
        for (String name : new TreeSet<>(list(dataset))) {
            if (!name.startsWith(JOB_PREFIX) || !Files.isDirectory(dataset.resolve(name))) {
                continue;
            }
            if (jobs != null && !jobs.contains(name.substring(JOB_PREFIX.length()))) {
                continue;
            }
            Path job = dataset.resolve(name);
            for (String shard : list(job)) {
                if (!listed.contains(name + "/" + shard)) {
                    removeTree(job.resolve(shard));
                    changed = true;
                }
            }
            if (list(job).isEmpty()) {
                try {
                    Files.delete(job);
                } catch (IOException e) {
                    throw io(job, "cannot delete", e);
                }
                changed = true;
            }
        }
        if (changed) {
            fsyncDir(dataset);
        }
    }

    /**
     * For the protocol tests, without Spark ({@code SinkDataset OP DATASET ...}, shards named
     * {@code JOB/SHARD} as written by {@code ShardWriter}'s test entry; records and bytes are
     * not used by the commit): {@code commit DATASET append|overwrite JOB/SHARD...},
     * {@code commit-stream DATASET STREAM BATCH_ID JOB/SHARD...} (prints {@code published} or
     * {@code dropped}), {@code abort-job DATASET JOB}, {@code abort-shards DATASET JOB/SHARD...}.
     * Errors print {@code ERROR ConfigError: <message>}.
     */
    public static void main(String[] args) {
        Path dataset = Paths.get(args[1]);
        int first = args[0].equals("commit") ? 3 : args[0].equals("commit-stream") ? 4 : 2;
        List<LogSink.ShardCommit> commits = new ArrayList<>();
        for (int i = first; i < args.length; i++) {
            String[] js = args[i].split("/", 2);
            commits.add(new LogSink.ShardCommit(js[0], js.length > 1 ? js[1] : "", 0, 0));
        }
        try {
            switch (args[0]) {
                case "commit":
                    commitJob(dataset, commits, args[2].equals("overwrite"));
                    break;
                case "commit-stream":
                    boolean done = commitStreamBatch(dataset, commits, args[2], Long.parseLong(args[3]));
                    System.out.println(done ? "published" : "dropped");
                    break;
                case "abort-job":
                    abortJob(dataset, args[2]);
                    break;
                case "abort-shards":
                    abortShards(dataset, commits);
                    break;
                default:
                    System.err.println("usage: SinkDataset commit|commit-stream|abort-job|abort-shards DATASET ...");
                    System.exit(2);
            }
        } catch (ConfigException e) {
            System.out.println("ERROR ConfigError: " + e.getMessage());
        }
    }
}
