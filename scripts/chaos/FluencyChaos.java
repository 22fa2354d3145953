// The Forward producer of scripts/chaos.sh: the stock Fluency client
// (org.komamitsu:fluency-fluentd) sending numbered records with ack
// (PackedForward, at-least-once: a chunk whose ack does not come is sent
// again). Run in Java's single-file source mode:
//
//   java -cp "$(cat ~/.cache/tidegate/fluency.classpath)" FluencyChaos.java \
//        HOST PORT TAG RATE_PER_SEC STOP_FILE
//
// Record i is {"run": "chaos", "seq": i, "msg": "..."}. It emits at RATE
// until STOP_FILE exists, then waits until every chunk was acknowledged.
// Fluency does not say which record an ack covered, only that a chunk left
// its buffer once acknowledged, so it prints:
//   ACK <epoch ms>            whenever the buffered bytes went down (an ack)
//   EMITTED <count>           once emitting stopped: records are 0..count-1
//   SENT <count>              once all of them were acknowledged (exit 0)
//   UNFLUSHED <bytes>         when they could not be within 60 s (exit 1)
import java.util.HashMap;
import java.util.Map;
import java.util.concurrent.atomic.AtomicBoolean;

import org.komamitsu.fluency.Fluency;
import org.komamitsu.fluency.fluentd.FluencyBuilderForFluentd;

public class FluencyChaos {
    public static void main(String[] args) throws Exception {
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        String tag = args[2];
        long rate = Long.parseLong(args[3]);
        java.io.File stop = new java.io.File(args[4]);

        FluencyBuilderForFluentd builder = new FluencyBuilderForFluentd();
        builder.setAckResponseMode(true);
        builder.setBufferChunkInitialSize(16 * 1024);
        builder.setBufferChunkRetentionSize(64 * 1024);
        builder.setBufferChunkRetentionTimeMillis(100);
        builder.setFlushAttemptIntervalMillis(50);
        builder.setMaxBufferSize(64L * 1024 * 1024);
        // Retry through a dead, stopped or broker-less node: an ack that does
        // not come within 3 s means the chunk is sent again.
        builder.setReadTimeoutMilli(3_000);
        builder.setConnectionTimeoutMilli(2_000);
        builder.setSenderMaxRetryCount(100_000);
        builder.setSenderBaseRetryIntervalMillis(100);
        builder.setSenderMaxRetryIntervalMillis(500);
        builder.setWaitUntilBufferFlushed(60);
        builder.setWaitUntilFlusherTerminated(30);
        Fluency fluency = builder.build(host, port);

        AtomicBoolean done = new AtomicBoolean(false);
        Thread watch = new Thread(() -> {
            long last = 0;
            while (!done.get()) {
                long now = fluency.getBufferedDataSize();
                if (now < last) {
                    System.out.println("ACK " + System.currentTimeMillis());
                    System.out.flush();
                }
                last = now;
                try {
                    Thread.sleep(20);
                } catch (InterruptedException e) {
                    return;
                }
            }
        });
        watch.setDaemon(true);
        watch.start();

        long start = System.nanoTime();
        String pad = "x".repeat(40);
        long i = 0;
        while (!stop.exists()) {
            long due = start + i * 1_000_000_000L / rate;
            long wait = due - System.nanoTime();
            if (wait > 0) {
                Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
            }
            Map<String, Object> record = new HashMap<>();
            record.put("run", "chaos");
            record.put("seq", i);
            record.put("msg", pad);
            // emit blocks (BufferFullException retried) rather than drop.
            while (true) {
                try {
                    fluency.emit(tag, record);
                    break;
                } catch (org.komamitsu.fluency.BufferFullException e) {
                    Thread.sleep(10);
                }
            }
            i++;
        }
        System.out.println("EMITTED " + i);
        fluency.flush();
        boolean flushed = fluency.waitUntilAllBufferFlushed(60);
        long left = fluency.getBufferedDataSize();
        done.set(true);
        fluency.close();
        fluency.waitUntilFlusherTerminated(30);
        if (!flushed || left > 0) {
            System.out.println("UNFLUSHED " + left);
            System.exit(1);
        }
        System.out.println("ACK " + System.currentTimeMillis());
        System.out.println("SENT " + i);
        System.exit(0);
    }
}
