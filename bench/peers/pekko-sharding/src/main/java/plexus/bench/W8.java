package plexus.bench;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.time.Duration;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import com.typesafe.config.Config;
import com.typesafe.config.ConfigFactory;
import org.HdrHistogram.Histogram;
import org.HdrHistogram.HistogramIterationValue;
import org.apache.pekko.actor.Address;
import org.apache.pekko.actor.AddressFromURIString;
import org.apache.pekko.actor.CoordinatedShutdown;
import org.apache.pekko.actor.typed.ActorRef;
import org.apache.pekko.actor.typed.ActorSystem;
import org.apache.pekko.actor.typed.Behavior;
import org.apache.pekko.actor.typed.javadsl.AbstractBehavior;
import org.apache.pekko.actor.typed.javadsl.ActorContext;
import org.apache.pekko.actor.typed.javadsl.Adapter;
import org.apache.pekko.actor.typed.javadsl.Behaviors;
import org.apache.pekko.actor.typed.javadsl.Receive;
import org.apache.pekko.cluster.MemberStatus;
import org.apache.pekko.cluster.sharding.ShardRegion;
import org.apache.pekko.cluster.sharding.typed.ShardingEnvelope;
import org.apache.pekko.cluster.sharding.typed.javadsl.ClusterSharding;
import org.apache.pekko.cluster.sharding.typed.javadsl.Entity;
import org.apache.pekko.cluster.sharding.typed.javadsl.EntityRef;
import org.apache.pekko.cluster.sharding.typed.javadsl.EntityTypeKey;
import org.apache.pekko.cluster.typed.Cluster;
import org.apache.pekko.cluster.typed.Join;
import org.apache.pekko.cluster.typed.JoinSeedNodes;
import org.apache.pekko.pattern.Patterns;

/**
 * W8 entities (bench/WORKLOADS.md) on Apache Pekko Cluster Sharding, typed
 * Java API: the same roles and line protocol as the Plexus side
 * (bench/src/w8.rs), so `plexus-bench w8` drives both.
 *
 * <pre>
 *   java -jar target/pekko-sharding.jar member [--seed ADDRESS] [--shards N] [--rebalance-ms MS]
 *   java -jar target/pekko-sharding.jar client --seed ADDRESS --index I --clients C
 *        --entities N --in-flight K --members M [--ask-timeout-s S]
 * </pre>
 */
public final class W8 {
  /** Messages between JVMs: Jackson CBOR (records; typed ActorRefs included). */
  public interface CborSerializable {}

  public interface Command extends CborSerializable {}

  /** Count one more; answered with the new count. */
  public record Add(ActorRef<Long> replyTo) implements Command {}

  /** The count. */
  public record Get(ActorRef<Long> replyTo) implements Command {}

  static final EntityTypeKey<Command> TYPE = EntityTypeKey.create(Command.class, "counter");

  /** The Adds this member's entities handled. */
  static final AtomicLong HANDLED = new AtomicLong();

  static final class Counter extends AbstractBehavior<Command> {
    private long count;

    Counter(ActorContext<Command> ctx) {
      super(ctx);
    }

    @Override
    public Receive<Command> createReceive() {
      return newReceiveBuilder()
          .onMessage(Add.class, m -> {
            count++;
            HANDLED.incrementAndGet();
            m.replyTo().tell(count);
            return this;
          })
          .onMessage(Get.class, m -> {
            m.replyTo().tell(count);
            return this;
          })
          .build();
    }
  }

  static void say(String line) {
    synchronized (System.out) {
      System.out.println(line);
      System.out.flush();
    }
  }

  static Map<String, String> options(String[] args, int from) {
    Map<String, String> o = new HashMap<>();
    for (int i = from; i + 1 < args.length; i += 2) {
      o.put(args[i].replaceFirst("^--", ""), args[i + 1]);
    }
    return o;
  }

  static Config config(String role, Map<String, String> o) {
    String shards = o.getOrDefault("shards", "1000");
    long rebalanceMs = Long.parseLong(o.getOrDefault("rebalance-ms", "5000"));
    String text = String.join("\n",
        "pekko.loglevel = INFO",
        "pekko.log-dead-letters = 10",
        "pekko.loggers = [\"org.apache.pekko.event.slf4j.Slf4jLogger\"]",
        "pekko.logging-filter = \"org.apache.pekko.event.slf4j.Slf4jLoggingFilter\"",
        "pekko.actor.provider = cluster",
        "pekko.actor.serialization-bindings { \"plexus.bench.W8$CborSerializable\" = jackson-cbor }",
        "pekko.remote.artery.canonical.hostname = \"127.0.0.1\"",
        "pekko.remote.artery.canonical.port = 0",
        "pekko.cluster.roles = [" + role + "]",
        "pekko.cluster.jmx.enabled = off",
        "pekko.cluster.downing-provider-class = \"org.apache.pekko.cluster.sbr.SplitBrainResolverProvider\"",
        "pekko.cluster.sharding.number-of-shards = " + shards,
        "pekko.cluster.sharding.rebalance-interval = " + rebalanceMs + "ms",
        // The allocation strategy of Pekko 1.x that moves many shards per
        // round (used when the absolute limit is above 0; the default, 0,
        // keeps the old one, which moves one shard per round): at most a
        // tenth of the shards per round, as Plexus' default.
        "pekko.cluster.sharding.least-shard-allocation-strategy.rebalance-absolute-limit = "
            + Math.max(1, Integer.parseInt(shards) / 10),
        "pekko.cluster.sharding.least-shard-allocation-strategy.rebalance-relative-limit = 0.1",
        "pekko.coordinated-shutdown.exit-jvm = off",
        "pekko.coordinated-shutdown.run-by-jvm-shutdown-hook = off");
    return ConfigFactory.parseString(text).withFallback(ConfigFactory.load());
  }

  static ActorRef<ShardingEnvelope<Command>> init(ActorSystem<?> system) {
    return ClusterSharding.get(system)
        .init(Entity.of(TYPE, ctx -> Behaviors.<Command>setup(Counter::new)).withRole("member"));
  }

  static void join(ActorSystem<?> system, String seed) {
    Cluster cluster = Cluster.get(system);
    if (seed == null) {
      cluster.manager().tell(Join.create(cluster.selfMember().address()));
    } else {
      // Retried until it is in (seed-node-timeout).
      cluster.manager().tell(new JoinSeedNodes(List.of(AddressFromURIString.parse(seed))));
    }
  }

  static long upMembers(ActorSystem<?> system) {
    long n = 0;
    for (org.apache.pekko.cluster.Member m : Cluster.get(system).state().getMembers()) {
      if (m.status() == MemberStatus.up() && m.hasRole("member")) {
        n++;
      }
    }
    return n;
  }

  static boolean selfUp(ActorSystem<?> system) {
    return Cluster.get(system).selfMember().status() == MemberStatus.up();
  }

  public static void main(String[] args) throws Exception {
    if (args.length == 0) {
      System.err.println("usage: member|client [options]");
      System.exit(2);
    }
    Map<String, String> o = options(args, 1);
    switch (args[0]) {
      case "member" -> member(o);
      case "client" -> client(o);
      default -> {
        System.err.println("unknown role " + args[0]);
        System.exit(2);
      }
    }
  }

  static void member(Map<String, String> o) throws Exception {
    ActorSystem<Void> system = ActorSystem.create(Behaviors.empty(), "W8", config("member", o));
    ActorRef<ShardingEnvelope<Command>> region = init(system);
    join(system, o.get("seed"));
    long guard = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
    while (!selfUp(system)) {
      if (System.nanoTime() > guard) {
        System.err.println("w8 member: not up within 120 s");
        System.exit(1);
      }
      Thread.sleep(20);
    }
    say("READY " + Cluster.get(system).selfMember().address());
    org.apache.pekko.actor.ActorRef classic = Adapter.toClassic(region);
    ScheduledExecutorService stats = Executors.newSingleThreadScheduledExecutor();
    stats.scheduleWithFixedDelay(() -> {
      try {
        Object answer = Patterns.ask(classic, ShardRegion.getRegionStatsInstance(), Duration.ofSeconds(2))
            .toCompletableFuture().get(3, TimeUnit.SECONDS);
        ShardRegion.ShardRegionStats s = (ShardRegion.ShardRegionStats) answer;
        long active = 0;
        for (Object n : s.getStats().values()) {
          active += ((Number) n).longValue();
        }
        // A shard that did not answer within 3 s is still hosted here.
        say("STATS shards=" + (s.getStats().size() + s.getFailed().size()) + " active=" + active + " held=0 handled=" + HANDLED.get());
      } catch (Exception e) {
        // A stats round that timed out (busy, or leaving): skipped.
      }
    }, 0, 200, TimeUnit.MILLISECONDS);
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    String line;
    while ((line = in.readLine()) != null) {
      switch (line.trim()) {
        case "LEAVE" -> {
          long t = System.nanoTime();
          AtomicLong handedOver = new AtomicLong();
          // The cluster-leave phase runs after every shard region handed
          // its shards over (phase cluster-sharding-shutdown-region).
          CoordinatedShutdown cs = CoordinatedShutdown.get(system);
          cs.addTask(CoordinatedShutdown.PhaseClusterLeave(), "w8-handed-over", () -> {
            handedOver.compareAndSet(0, System.nanoTime());
            return java.util.concurrent.CompletableFuture.completedFuture(org.apache.pekko.Done.getInstance());
          });
          cs.runAll(CoordinatedShutdown.clusterLeavingReason()).toCompletableFuture().get(180, TimeUnit.SECONDS);
          long end = System.nanoTime();
          long leaveMs = TimeUnit.NANOSECONDS.toMillis((handedOver.get() == 0 ? end : handedOver.get()) - t);
          stats.shutdownNow();
          say("LEFT leave_ms=" + leaveMs + " cluster_leave_ms=" + TimeUnit.NANOSECONDS.toMillis(end - t)
              + " ok=true shards=0 handled=" + HANDLED.get());
          System.exit(0);
        }
        case "FINAL" -> say("FINAL handled=" + HANDLED.get());
        case "EXIT" -> {
          System.exit(0);
        }
        default -> System.err.println("w8 member: unknown command " + line);
      }
    }
    System.exit(0);
  }

  static void client(Map<String, String> o) throws Exception {
    ActorSystem<Void> system = ActorSystem.create(Behaviors.empty(), "W8", config("client", o));
    init(system); // a proxy: this node has no `member` role
    join(system, o.get("seed"));
    long index = Long.parseLong(o.get("index"));
    long clients = Long.parseLong(o.get("clients"));
    long entities = Long.parseLong(o.get("entities"));
    int inFlight = Integer.parseInt(o.get("in-flight"));
    long members = Long.parseLong(o.get("members"));
    Duration timeout = Duration.ofSeconds(Long.parseLong(o.getOrDefault("ask-timeout-s", "30")));
    long guard = System.nanoTime() + TimeUnit.SECONDS.toNanos(120);
    while (!selfUp(system) || upMembers(system) < members) {
      if (System.nanoTime() > guard) {
        System.err.println("w8 client: the members were not up within 120 s");
        System.exit(1);
      }
      Thread.sleep(20);
    }
    say("READY");
    ClusterSharding sharding = ClusterSharding.get(system);
    AtomicLong sent = new AtomicLong();
    AtomicLong answered = new AtomicLong();
    AtomicLong failed = new AtomicLong();
    AtomicBoolean stop = new AtomicBoolean();
    List<Histogram> hists = new ArrayList<>();
    CountDownLatch[] done = new CountDownLatch[1];
    ScheduledExecutorService ticker = Executors.newSingleThreadScheduledExecutor();
    BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
    String line;
    while ((line = in.readLine()) != null) {
      switch (line.trim()) {
        case "WARM" -> {
          long t = System.nanoTime();
          AtomicLong next = new AtomicLong();
          AtomicLong warmFailed = new AtomicLong();
          CountDownLatch warmed = new CountDownLatch(inFlight);
          for (int k = 0; k < inFlight; k++) {
            warm(sharding, next, warmFailed, warmed, index, clients, entities, timeout);
          }
          warmed.await();
          say("WARMED ms=" + TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - t) + " failed=" + warmFailed.get());
        }
        case "GO" -> {
          done[0] = new CountDownLatch(inFlight);
          for (int k = 0; k < inFlight; k++) {
            Histogram h = new Histogram(600_000_000L, 3);
            hists.add(h);
            ask(sharding, h, sent, answered, failed, stop, done[0], entities, timeout);
          }
          long start = System.nanoTime();
          ticker.scheduleAtFixedRate(() -> say("TICK n=" + answered.get()), 1000, 1000, TimeUnit.MILLISECONDS);
        }
        case "STOP" -> {
          stop.set(true);
          ticker.shutdownNow();
          if (done[0] != null) {
            done[0].await();
          }
          Histogram all = new Histogram(600_000_000L, 3);
          for (Histogram h : hists) {
            all.add(h);
          }
          say("DONE sent=" + sent.get() + " answered=" + answered.get() + " failed=" + failed.get());
          StringBuilder b = new StringBuilder("HIST ");
          boolean first = true;
          for (HistogramIterationValue v : all.recordedValues()) {
            if (!first) {
              b.append(',');
            }
            first = false;
            b.append(v.getValueIteratedTo()).append(':').append(v.getCountAtValueIteratedTo());
          }
          say(b.toString());
        }
        case "EXIT" -> System.exit(0);
        default -> System.err.println("w8 client: unknown command " + line);
      }
    }
    System.exit(0);
  }

  /** One warm-up lane: asks Get of the next id of this client's share until none is left. */
  static void warm(ClusterSharding sharding, AtomicLong next, AtomicLong failed, CountDownLatch warmed,
      long index, long clients, long entities, Duration timeout) {
    long id = index + next.getAndIncrement() * clients;
    if (id >= entities) {
      warmed.countDown();
      return;
    }
    EntityRef<Command> ref = sharding.entityRefFor(TYPE, Long.toString(id));
    ref.<Long>ask(Get::new, timeout).whenComplete((v, e) -> {
      if (e != null && failed.incrementAndGet() <= 5) {
        System.err.println("w8 client: warm-up ask: " + e);
      }
      warm(sharding, next, failed, warmed, index, clients, entities, timeout);
    });
  }

  /** One asking lane: Add of a uniformly random id, the next when it is answered. */
  static void ask(ClusterSharding sharding, Histogram h, AtomicLong sent, AtomicLong answered, AtomicLong failed,
      AtomicBoolean stop, CountDownLatch done, long entities, Duration timeout) {
    if (stop.get()) {
      done.countDown();
      return;
    }
    long id = ThreadLocalRandom.current().nextLong(entities);
    EntityRef<Command> ref = sharding.entityRefFor(TYPE, Long.toString(id));
    sent.incrementAndGet();
    long t = System.nanoTime();
    ref.<Long>ask(Add::new, timeout).whenComplete((v, e) -> {
      if (e == null) {
        h.recordValue(Math.max(1, Math.min(600_000_000L, (System.nanoTime() - t) / 1000)));
        answered.incrementAndGet();
      } else if (failed.incrementAndGet() <= 20) {
        System.err.println("w8 client: ask failed: " + e);
      }
      ask(sharding, h, sent, answered, failed, stop, done, entities, timeout);
    });
  }
}
