package outbox.spark;

import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.sql.api.java.UDF1;

/**
 * The data source's {@code headers} (map&lt;string,string&gt;) from a record's stored headers,
 * the JSON text of an object of strings, in one pass over the text, the entries in the object's
 * order (spark_jobs/headers_jar.py builds it, spark_jobs/reader/jvm.py parsed_headers uses it).
 *
 * Spark's from_json makes a general JSON parser for every row; over the JVM read's rows that
 * parse added a third to a half to the time of reading them from the table (docs/SPARK.md,
 * "The headers' parser").
 * This reads only the shape the service stores, compact or with the whitespace jsonb's print
 * puts between tokens. Any other text (a value that is not a string, a nested value, a
 * duplicate name, an unescaped control character, a bad escape, anything after the object)
 * gives null, and parsed_headers then asks from_json: the map is from_json's in every case.
 */
public final class HeadersMap implements UDF1<String, Map<String, String>> {
    private static final long serialVersionUID = 1L;

    @Override
    public Map<String, String> call(String text) {
        if (text == null) return null;
        try {
            return new Scanner(text).object();
        } catch (NotTheShape | IndexOutOfBoundsException e) {
            return null;
        }
    }

    /** The text is not an object of strings as the service stores them. */
    private static final class NotTheShape extends Exception {
        private static final long serialVersionUID = 1L;
        static final NotTheShape INSTANCE = new NotTheShape();

        private NotTheShape() {
            super(null, null, false, false);  // no stack trace: it is the common way out of odd text
        }
    }

    private static final class Scanner {
        private final String s;
        private int i;
        private StringBuilder sb;

        Scanner(String s) {
            this.s = s;
        }

        private void whitespace() {
            while (i < s.length()) {
                char c = s.charAt(i);
                if (c == ' ' || c == '\t' || c == '\n' || c == '\r') i++;
                else break;
            }
        }

        private void expect(char c) throws NotTheShape {
            whitespace();
            if (s.charAt(i) != c) throw NotTheShape.INSTANCE;
            i++;
        }

        Map<String, String> object() throws NotTheShape {
            Map<String, String> m = new LinkedHashMap<>();
            expect('{');
            whitespace();
            if (s.charAt(i) == '}') {
                i++;
                return end(m);
            }
            while (true) {
                String name = string();
                expect(':');
                // from_json refuses a duplicate name (spark.sql.mapKeyDedupPolicy): it decides.
                if (m.put(name, string()) != null) throw NotTheShape.INSTANCE;
                whitespace();
                char c = s.charAt(i++);
                if (c == '}') return end(m);
                if (c != ',') throw NotTheShape.INSTANCE;
            }
        }

        private Map<String, String> end(Map<String, String> m) throws NotTheShape {
            whitespace();
            if (i != s.length()) throw NotTheShape.INSTANCE;
            return m;
        }

        private String string() throws NotTheShape {
            whitespace();
            if (s.charAt(i) != '"') throw NotTheShape.INSTANCE;
            int start = ++i;
            // Most names and values hold no escape: the text between the quotes as it is.
            while (true) {
                char c = s.charAt(i);
                if (c == '"') return s.substring(start, i++);
                if (c == '\\') break;
                if (c < 0x20) throw NotTheShape.INSTANCE;  // JSON wants control characters escaped
                i++;
            }
            if (sb == null) sb = new StringBuilder();
            sb.setLength(0);
            sb.append(s, start, i);
            while (true) {
                char c = s.charAt(i++);
                if (c == '"') return sb.toString();
                if (c < 0x20) throw NotTheShape.INSTANCE;
                if (c != '\\') {
                    sb.append(c);
                    continue;
                }
                switch (s.charAt(i++)) {
                    case '"': sb.append('"'); break;
                    case '\\': sb.append('\\'); break;
                    case '/': sb.append('/'); break;
                    case 'b': sb.append('\b'); break;
                    case 'f': sb.append('\f'); break;
                    case 'n': sb.append('\n'); break;
                    case 'r': sb.append('\r'); break;
                    case 't': sb.append('\t'); break;
                    case 'u': sb.append(hex4()); break;
                    default: throw NotTheShape.INSTANCE;
                }
            }
        }

        private char hex4() throws NotTheShape {
            int v = 0;
            for (int k = 0; k < 4; k++) {
                int d = Character.digit(s.charAt(i++), 16);
                if (d < 0) throw NotTheShape.INSTANCE;
                v = v * 16 + d;
            }
            return (char) v;
        }
    }
}
