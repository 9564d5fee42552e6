package engine.spark;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;

/**
 * Whether an append log's writer is live: the JVM's stand-in for
 * {@code engine.fs.lock.probe_lock(fs, "<dir>/.lock")}, which the Python reader asks before
 * it shows a damaged newest index as the writer's next open repairs it.
 *
 * <p>The writer (and a lock-holding reader) holds a {@code flock} on {@code <dir>/.lock}.
 * The JVM cannot take a flock (its {@link java.nio.channels.FileLock} is an fcntl lock,
 * which ignores flocks), and a probe must not take one anyway; so this reads Linux's
 * {@code /proc/locks} for a FLOCK on the lock file's inode.  That sees every
 * process of the machine, so it answers for a local file system only; a path of another
 * Hadoop file system (HDFS, object stores) cannot have a live engine writer (the writer
 * needs a local POSIX file system), so there the answer is "none".  Where
 * {@code /proc/locks} cannot be read, a live writer is assumed: the conservative answer
 * (the index entries that agree only, as with a live writer).
 */
final class WriterLock {
    private WriterLock() {
    }

    /** engine.applog.view.LOCK_FILE. */
    static final String LOCK_FILE = ".lock";

    /** Whether some process holds a flock on the local file {@code lockPath} (false if it is missing). */
    static boolean held(Hfs fs, String lockPath) {
        Path local = fs.localPath(lockPath);
        if (local == null) {
            return false;
        }
        long ino;
        try {
            ino = ((Number) Files.getAttribute(local, "unix:ino")).longValue();
        } catch (NoSuchFileException e) {
            return false;
        } catch (IOException | UnsupportedOperationException | IllegalArgumentException e) {
            return true;
        }
        List<String> lines;
        try {
            lines = Files.readAllLines(Paths.get("/proc/locks"), StandardCharsets.US_ASCII);
        } catch (IOException e) {
            return true;
        }
        // /proc/locks prints "MAJ:MIN:INODE".  The inode alone is matched: the device
        // numbers stat gives need not be the ones printed there (overlay and other
        // stacked file systems), and a same-numbered inode elsewhere only makes the
        // answer conservative (agreeing entries only).
        String want = ":" + ino;
        for (String line : lines) {
            // "1: FLOCK  ADVISORY  WRITE 1234 fd:01:5678 0 EOF"; "1: -> FLOCK ..." is a waiter, not a holder.
            String[] f = line.trim().split("\\s+");
            if (f.length >= 6 && f[1].equals("FLOCK") && f[5].endsWith(want)) {
                return true;
            }
        }
        return false;
    }
}
