package engine.spark;

import java.nio.charset.StandardCharsets;

/**
 * Python's spellings of values in error messages ({@code repr} of str and bytes, {@code :08x},
 * {@code bytes.hex()}, UTF-8 decode errors), so the JVM decoders' errors read word for word as
 * the Python codecs' (the parity tests compare them).
 */
final class Py {
    private Py() {
    }

    /** {@code f"{n:08x}"}. */
    static String hex8(long n) {
        return String.format("%08x", n);
    }

    /** {@code bytes.hex()}. */
    static String hex(byte[] b) {
        StringBuilder s = new StringBuilder(b.length * 2);
        for (byte x : b) {
            s.append(String.format("%02x", x & 0xFF));
        }
        return s.toString();
    }

    /** {@code ascii.encode().startswith(prefix)}. */
    static boolean startsWith(String ascii, byte[] prefix) {
        byte[] a = ascii.getBytes(StandardCharsets.ISO_8859_1);
        if (prefix.length > a.length) {
            return false;
        }
        for (int i = 0; i < prefix.length; i++) {
            if (a[i] != prefix[i]) {
                return false;
            }
        }
        return true;
    }

    /** {@code repr(bytes)}: b'...' (or b"..." when it holds ' and no "). */
    static String repr(byte[] b) {
        boolean single = false;
        boolean dbl = false;
        for (byte x : b) {
            single |= x == '\'';
            dbl |= x == '"';
        }
        char q = single && !dbl ? '"' : '\'';
        StringBuilder s = new StringBuilder("b").append(q);
        for (byte x : b) {
            int c = x & 0xFF;
            if (c == q || c == '\\') {
                s.append('\\').append((char) c);
            } else if (c == '\t') {
                s.append("\\t");
            } else if (c == '\n') {
                s.append("\\n");
            } else if (c == '\r') {
                s.append("\\r");
            } else if (c < 0x20 || c >= 0x7F) {
                s.append(String.format("\\x%02x", c));
            } else {
                s.append((char) c);
            }
        }
        return s.append(q).toString();
    }

    /** {@code repr(str)} (printable non-ASCII kept as it is, as Python 3 does). */
    static String repr(String v) {
        boolean single = v.indexOf('\'') >= 0;
        boolean dbl = v.indexOf('"') >= 0;
        char q = single && !dbl ? '"' : '\'';
        StringBuilder s = new StringBuilder().append(q);
        for (int i = 0; i < v.length(); ) {
            int c = v.codePointAt(i);
            i += Character.charCount(c);
            if (c == q || c == '\\') {
                s.append('\\').appendCodePoint(c);
            } else if (c == '\t') {
                s.append("\\t");
            } else if (c == '\n') {
                s.append("\\n");
            } else if (c == '\r') {
                s.append("\\r");
            } else if (c < 0x20 || c == 0x7F) {
                s.append(String.format("\\x%02x", c));
            } else if (!printable(c)) {
                s.append(c <= 0xFF ? String.format("\\x%02x", c) : c <= 0xFFFF ? String.format("\\u%04x", c)
                    : String.format("\\U%08x", c));
            } else {
                s.appendCodePoint(c);
            }
        }
        return s.append(q).toString();
    }

    private static boolean printable(int c) {
        if (c < 0x7F) {
            return c >= 0x20;
        }
        int t = Character.getType(c);
        return !(t == Character.CONTROL || t == Character.FORMAT || t == Character.SURROGATE
            || t == Character.PRIVATE_USE || t == Character.UNASSIGNED || t == Character.LINE_SEPARATOR
            || t == Character.PARAGRAPH_SEPARATOR || (t == Character.SPACE_SEPARATOR && c != ' '));
    }

    /**
     * {@code raw.decode("utf-8")} of {@code b[at:at+n]}; CPython's error as a CorruptFileException
     * ({@code path}, {@code offset}: "a UTF-8 persistence id", found the UnicodeDecodeError's words).
     */
    static String utf8(byte[] b, int at, int n, String path, long offset) {
        int i = 0;
        while (i < n) {
            int c = b[at + i] & 0xFF;
            if (c < 0x80) {
                i++;
                continue;
            }
            int need;
            int lo = 0x80;
            int hi = 0xBF;
            if (c >= 0xC2 && c <= 0xDF) {
                need = 1;
            } else if (c >= 0xE0 && c <= 0xEF) {
                need = 2;
                lo = c == 0xE0 ? 0xA0 : 0x80;
                hi = c == 0xED ? 0x9F : 0xBF;
            } else if (c >= 0xF0 && c <= 0xF4) {
                need = 3;
                lo = c == 0xF0 ? 0x90 : 0x80;
                hi = c == 0xF4 ? 0x8F : 0xBF;
            } else {
                throw bad(path, offset, b[at + i], i, i, "invalid start byte");
            }
            for (int k = 1; k <= need; k++) {
                if (i + k >= n) {
                    throw bad(path, offset, b[at + i], i, n - 1, "unexpected end of data");
                }
                int d = b[at + i + k] & 0xFF;
                int l = k == 1 ? lo : 0x80;
                int h = k == 1 ? hi : 0xBF;
                if (d < l || d > h) {
                    throw bad(path, offset, b[at + i], i, i + k - 1, "invalid continuation byte");
                }
            }
            i += need + 1;
        }
        return new String(b, at, n, StandardCharsets.UTF_8);
    }

    private static CorruptFileException bad(String path, long offset, byte first, int start, int stop, String why) {
        String where = start == stop
            ? "can't decode byte 0x" + String.format("%02x", first & 0xFF) + " in position " + start
            : "can't decode bytes in position " + start + "-" + stop;
        return new CorruptFileException(path, offset, "a UTF-8 persistence id", "'utf-8' codec " + where + ": " + why);
    }
}
