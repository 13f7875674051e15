// Positional reads of Hadoop FileSystem paths for a Python worker (kanalyze.spark.hadoop_read).
//
// A Python worker cannot call its executor's JVM, and pyarrow reaches only the file systems it
// was built for (hdfs:// only with libhdfs). This small program is a second JVM on the worker's
// host with Spark's own jars: it opens any path Hadoop's FileSystem opens (hdfs, s3a, gs, abfs,
// viewfs, ...) with the settings the driver shipped, and answers one request at a time, so the
// worker reads byte ranges in bounded blocks and never a whole file.
//
// Protocol (big-endian, on stdin/stdout): first the settings, an int n then n (key, value)
// strings; then requests (path string, long offset, int length; length -1 asks the size), each
// answered by an int status (>= 0: that many bytes follow, or a long size follows for -1;
// -1: a string error message follows). A string is an int byte count and UTF-8 bytes. The
// program ends when stdin ends.
import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.DataInputStream;
import java.io.DataOutputStream;
import java.io.EOFException;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.hadoop.conf.Configuration;
import org.apache.hadoop.fs.FSDataInputStream;
import org.apache.hadoop.fs.FileSystem;
import org.apache.hadoop.fs.Path;

public final class HadoopRead {
  private static final int OPEN_STREAMS = 8; // streams kept open, least recently used closed

  private static String readString(DataInputStream in) throws IOException {
    byte[] b = new byte[in.readInt()];
    in.readFully(b);
    return new String(b, StandardCharsets.UTF_8);
  }

  private static void writeString(DataOutputStream out, String s) throws IOException {
    byte[] b = s.getBytes(StandardCharsets.UTF_8);
    out.writeInt(b.length);
    out.write(b);
  }

  public static void main(String[] args) throws IOException {
    DataInputStream in = new DataInputStream(new BufferedInputStream(System.in, 1 << 16));
    DataOutputStream out =
        new DataOutputStream(
            new BufferedOutputStream(new FileOutputStream(FileDescriptor.out), 1 << 20));
    Configuration conf = new Configuration();
    int settings = in.readInt();
    for (int i = 0; i < settings; i++) {
      conf.set(readString(in), readString(in));
    }
    Map<String, FSDataInputStream> open =
        new LinkedHashMap<String, FSDataInputStream>(16, 0.75f, true) {
          @Override
          protected boolean removeEldestEntry(Map.Entry<String, FSDataInputStream> e) {
            if (size() <= OPEN_STREAMS) {
              return false;
            }
            try {
              e.getValue().close();
            } catch (IOException ignored) {
              // a stream that fails to close is dropped all the same
            }
            return true;
          }
        };
    byte[] buf = new byte[0];
    while (true) {
      String path;
      try {
        path = readString(in);
      } catch (EOFException end) {
        break;
      }
      long offset = in.readLong();
      int length = in.readInt();
      try {
        Path p = new Path(path);
        if (length < 0) {
          long size = p.getFileSystem(conf).getFileStatus(p).getLen();
          out.writeInt(0);
          out.writeLong(size);
        } else {
          FSDataInputStream s = open.get(path);
          if (s == null) {
            s = p.getFileSystem(conf).open(p);
            open.put(path, s);
          }
          if (buf.length < length) {
            buf = new byte[length];
          }
          int got = 0;
          while (got < length) {
            int n = s.read(offset + got, buf, got, length - got);
            if (n < 0) {
              break;
            }
            got += n;
          }
          out.writeInt(got);
          out.write(buf, 0, got);
        }
      } catch (Exception e) {
        out.writeInt(-1);
        String why = e.getMessage();
        writeString(out, e.getClass().getSimpleName() + (why == null ? "" : ": " + why));
      }
      out.flush();
    }
    out.flush();
  }
}
