package engine.spark;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.channels.FileChannel;
import java.nio.channels.FileLock;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.nio.file.StandardOpenOption;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.locks.ReentrantLock;

/**
 * The commit lock of an engine-log sink dataset ({@code DATASET/_LOCK}): an exclusive POSIX
 * record lock of the file's first byte ({@link FileChannel#lock(long, long, boolean)}, fcntl
 * F_SETLKW).  Python takes the same lock as an open-file-description lock
 * ({@code engine.fs.take_record_lock}), which conflicts with this one, so the JVM's commit
 * and Python's ({@code engine spark cleanup}, {@code engine.spark.sink.commit_job}) exclude
 * each other.  A flock would not: flock and fcntl locks ignore each other.
 *
 * <p>POSIX record locks belong to the process, so two threads of one JVM would both get
 * it (the JDK refuses overlapping locks of one JVM instead): a lock per path inside the JVM
 * comes first.  The kernel drops the lock when the process dies: a held lock means a live
 * holder.  {@code main} takes it for the cross-runtime tests.
 */
final class SinkLock implements AutoCloseable {
    private static final ConcurrentHashMap<String, ReentrantLock> IN_JVM = new ConcurrentHashMap<>();
    private final ReentrantLock local;
    private final FileChannel channel;
    private final FileLock lock;

    private SinkLock(ReentrantLock local, FileChannel channel, FileLock lock) {
        this.local = local;
        this.channel = channel;
        this.lock = lock;
    }

    /** Take the lock of {@code file} (created when missing), waiting for its holder. */
    static SinkLock take(String file) {
        Path p = Paths.get(file).toAbsolutePath().normalize();
        ReentrantLock local = IN_JVM.computeIfAbsent(p.toString(), k -> new ReentrantLock());
        local.lock();
        FileChannel ch = null;
        try {
            ch = FileChannel.open(p, StandardOpenOption.CREATE, StandardOpenOption.WRITE);
            return new SinkLock(local, ch, ch.lock(0, 1, false));
        } catch (IOException e) {
            closeQuietly(ch);
            local.unlock();
            throw new UncheckedIOException(file + ": cannot take the commit lock of the sink dataset", e);
        } catch (RuntimeException | Error e) {
            closeQuietly(ch);
            local.unlock();
            throw e;
        }
    }

    /** Whether another process holds the lock of {@code file} now (it must exist). */
    static boolean heldElsewhere(String file) throws IOException {
        try (FileChannel ch = FileChannel.open(Paths.get(file), StandardOpenOption.WRITE)) {
            FileLock l = ch.tryLock(0, 1, false);
            if (l == null) {
                return true;
            }
            l.release();
            return false;
        }
    }

    private static void closeQuietly(FileChannel ch) {
        if (ch != null) {
            try {
                ch.close();
            } catch (IOException ignored) {
                // the failure being reported matters more
            }
        }
    }

    @Override
    public void close() {
        try {
            lock.release();
            channel.close();
        } catch (IOException e) {
            throw new UncheckedIOException(e);
        } finally {
            local.unlock();
        }
    }

    /**
     * For the tests: {@code probe FILE} prints {@code held} or {@code free};
     * {@code hold FILE} takes the lock (waiting), prints {@code locked}, and lets it go
     * when its standard input ends or gives a line.
     */
    public static void main(String[] args) throws IOException {
        if (args.length == 2 && args[0].equals("probe")) {
            System.out.println(heldElsewhere(args[1]) ? "held" : "free");
        } else if (args.length == 2 && args[0].equals("hold")) {
            try (SinkLock held = take(args[1])) {
                System.out.println("locked");
                System.out.flush();
                System.in.read();
            }
        } else {
            System.err.println("usage: SinkLock probe|hold FILE");
            System.exit(2);
        }
    }
}
