// Sends numbered records with Fluency (org.komamitsu:fluency-fluentd) in
// PackedForward mode with ack, the way the seed's max-throughput client does.
// Run in Java's single-file source mode:
//
//   java -cp "$(cat ~/.cache/tidegate/fluency.classpath)" FluencySender.java \
//        HOST PORT TAG COUNT [RATE_PER_SEC] [RUN_ID]
//
// Each record is {"run": RUN_ID, "seq": i, "msg": "..."}; i runs 0..COUNT-1.
// RATE_PER_SEC 0 (default) sends as fast as Fluency's buffer allows. Exits 0
// once Fluency reports every buffered chunk flushed and acknowledged, 1 if it
// could not within the timeout. Prints "SENT <count> <millis>" on success.
import java.util.HashMap;
import java.util.Map;

import org.komamitsu.fluency.Fluency;
import org.komamitsu.fluency.fluentd.FluencyBuilderForFluentd;

public class FluencySender {
    public static void main(String[] args) throws Exception {
        if (args.length < 4) {
            System.err.println("usage: FluencySender HOST PORT TAG COUNT [RATE_PER_SEC] [RUN_ID]");
            System.exit(2);
        }
        String host = args[0];
        int port = Integer.parseInt(args[1]);
        String tag = args[2];
        long count = Long.parseLong(args[3]);
        long rate = args.length > 4 ? Long.parseLong(args[4]) : 0;
        String run = args.length > 5 ? args[5] : "run";

        FluencyBuilderForFluentd builder = new FluencyBuilderForFluentd();
        builder.setAckResponseMode(true);
        // Small chunks flushed often: many chunks, many acks.
        builder.setBufferChunkInitialSize(64 * 1024);
        builder.setBufferChunkRetentionSize(256 * 1024);
        builder.setBufferChunkRetentionTimeMillis(200);
        builder.setFlushAttemptIntervalMillis(100);
        builder.setMaxBufferSize(64L * 1024 * 1024);
        // Keep retrying through a broker outage: the ack read times out, the
        // chunk is sent again (at-least-once).
        builder.setReadTimeoutMilli(5_000);
        builder.setConnectionTimeoutMilli(2_000);
        builder.setSenderMaxRetryCount(1_000);
        builder.setSenderBaseRetryIntervalMillis(200);
        builder.setSenderMaxRetryIntervalMillis(1_000);
        builder.setWaitUntilBufferFlushed(120);
        builder.setWaitUntilFlusherTerminated(120);
        Fluency fluency = builder.build(host, port);

        long start = System.nanoTime();
        String pad = "x".repeat(40);
        for (long i = 0; i < count; i++) {
            if (rate > 0) {
                long due = start + i * 1_000_000_000L / rate;
                long wait = due - System.nanoTime();
                if (wait > 0) {
                    Thread.sleep(wait / 1_000_000, (int) (wait % 1_000_000));
                }
            }
            Map<String, Object> record = new HashMap<>();
            record.put("run", run);
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
        }
        fluency.flush();
        boolean flushed = fluency.waitUntilAllBufferFlushed(180);
        fluency.close();
        fluency.waitUntilFlusherTerminated(30);
        long millis = (System.nanoTime() - start) / 1_000_000;
        if (!flushed || fluency.getBufferedDataSize() > 0) {
            System.out.println("UNFLUSHED " + fluency.getBufferedDataSize());
            System.exit(1);
        }
        System.out.println("SENT " + count + " " + millis);
    }
}
