package engine.spark;

import java.io.IOException;
import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteOrder;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.NoSuchFileException;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;

/**
 * A page store's change count, read without any lock: the JVM's side of the seqlock
 * {@code engine.pages.PageReader.take_unlocked} uses ({@code engine.fs.lock.GatedLock},
 * {@code docs/formats/pagestore.md}).  The count is the first 8 bytes of the gate file
 * {@code <store>-gate}, a u64 in native byte order shared through a mapping; every exclusive
 * hold of the store file (a writer's flush, checkpoint, header write, recovery, shrink) adds one
 * when it begins, before its first write, and one when it ends, after its last.  So a read made
 * between two loads of the count that are equal and even saw one flushed state, as under the
 * shared {@code flock} a Python reader takes (which the JVM cannot take: {@link WriterLock}).
 *
 * <p>Loads are volatile (a whole aligned 8-byte load, ordered after the reads before it), so
 * the count loaded after the last {@code pread} of a read is at least as new as any write that
 * read saw.
 */
final class StoreGate {
    /** engine.pages.storefile.GATE_SUFFIX. */
    static final String SUFFIX = "-gate";
    /** "No count": the store has no gate (yet); the reader looks at the file itself. */
    static final long NONE = Long.MIN_VALUE;
    /** How often an odd count (a writer writing) is looked at again before the read gives up. */
    static final int WAITS = 2000;

    private static final VarHandle U64 = MethodHandles.byteBufferViewVarHandle(long[].class, ByteOrder.nativeOrder());

    private final MappedByteBuffer words;

    private StoreGate(MappedByteBuffer words) {
        this.words = words;
    }

    /**
     * The gate of the store at {@code storePath}, mapped; null when there is no count to load: the
     * path is not a local file (no engine writer runs on another Hadoop file system: it needs a
     * local POSIX one), or the gate is missing or shorter than 8 bytes (no writer of this version
     * has opened the store).  Then the reader keeps comparing header bytes, size and modification
     * time, as before the count existed: a change within one modification-time tick may go
     * unseen there.
     */
    static StoreGate open(Hfs fs, String storePath) {
        Path local = fs.localPath(storePath + SUFFIX);
        if (local == null) {
            return null;
        }
        try (FileChannel ch = FileChannel.open(local, StandardOpenOption.READ)) {
            if (ch.size() < 8) {
                return null;
            }
            // (The mapping outlives the channel; read-only: the JVM never moves the count.)
            return new StoreGate(ch.map(FileChannel.MapMode.READ_ONLY, 0, 8));
        } catch (NoSuchFileException e) {
            return null;
        } catch (IOException e) {
            throw new java.io.UncheckedIOException(e);
        }
    }

    /** The change count now. */
    long count() {
        return (long) U64.getVolatile(words, 0);
    }

    /**
     * The count to read under: an even one, waited for while a writer holds the store file
     * exclusively; an odd one with no writer holding it is what a writer that died mid-write
     * left (the next writer moves it by two), taken as it is, since any writer that starts
     * after it was loaded moves it.  A writer holding it all along: {@link #busy}.
     */
    long settled(Hfs fs, String storePath) {
        for (int i = 0; ; i++) {
            long c = count();
            if ((c & 1) == 0 || !PagesFile.flockHeld(fs, storePath, true)) {
                return c;
            }
            if (i >= WAITS) {
                throw busy(storePath, i);
            }
            PagesFile.pause();
        }
    }

    /** The one-line error of a read that never found the store file still. */
    static IllegalStateException busy(String storePath, int tries) {
        return new IllegalStateException(storePath + ": the store kept changing under the read (" + tries
            + " tries, a writer flushing all along); read it again when the writer is quieter");
    }
}
