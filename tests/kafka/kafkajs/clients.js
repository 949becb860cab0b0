// kafkajs against the Kafka listener, driven by tests/kafka/test_kafkajs.py. Each command does
// what a kafkajs application does and prints what kafkajs gave it, one JSON object a line; the
// test asserts on those lines and on what the service stored.
//
//   node clients.js copy BOOTSTRAP INPUT OUTPUT GROUP TRANSACTIONAL_ID COUNT
//   node clients.js abort BOOTSTRAP TOPIC TRANSACTIONAL_ID VALUE...
//   node clients.js read BOOTSTRAP TOPIC COUNT QUIET_MS
//   node clients.js share BOOTSTRAP TOPIC GROUP PARTITIONS COUNT
"use strict";

const { Kafka, logLevel } = require("kafkajs");

// kafkajs's log lines go to stderr, so that stdout holds this script's lines only.
const toStderr = () => ({ namespace, level, log }) => {
  process.stderr.write(`${namespace} ${level} ${JSON.stringify(log)}\n`);
};

const [command, bootstrap, ...args] = process.argv.slice(2);
const kafka = new Kafka({
  clientId: "outbox-kafkajs-test",
  brokers: [bootstrap],
  logLevel: logLevel.ERROR,
  logCreator: toStderr,
  retry: { retries: 8, initialRetryTime: 100 },
});
const GROUP_TIMEOUTS = { sessionTimeout: 6000, heartbeatInterval: 200, rebalanceTimeout: 10000 };

function print(line) {
  process.stdout.write(JSON.stringify(line) + "\n");
}

function record(member, partition, message) {
  return {
    member,
    partition,
    offset: Number(message.offset),
    key: message.key === null ? null : message.key.toString(),
    value: message.value === null ? null : message.value.toString(),
  };
}

function until(condition) {
  return new Promise((resolve) => {
    const timer = setInterval(() => {
      if (condition()) {
        clearInterval(timer);
        resolve();
      }
    }, 20);
  });
}

// Consume-transform-produce: each batch the consumer is given becomes one transaction holding
// its results (the value times ten, to the input's partition of OUTPUT) and the group's
// offsets past it (sendOffsets), committed together.
async function copy(input, output, groupId, transactionalId, count) {
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 });
  const consumer = kafka.consumer({ groupId, readUncommitted: false, allowAutoTopicCreation: false,
    ...GROUP_TIMEOUTS });
  await producer.connect();
  await consumer.connect();
  await consumer.subscribe({ topics: [input], fromBeginning: true });
  let copied = 0;
  await consumer.run({
    autoCommit: false,
    eachBatch: async ({ batch }) => {
      const transaction = await producer.transaction();
      try {
        await transaction.send({
          topic: output,
          messages: batch.messages.map((m) => ({
            key: m.key, value: String(Number(m.value.toString()) * 10), partition: batch.partition,
          })),
        });
        const next = String(Number(batch.lastOffset()) + 1);
        await transaction.sendOffsets({
          consumerGroupId: groupId,
          topics: [{ topic: batch.topic, partitions: [{ partition: batch.partition, offset: next }] }],
        });
        await transaction.commit();
      } catch (e) {
        await transaction.abort();
        throw e;
      }
      for (const m of batch.messages) print({ copied: record(transactionalId, batch.partition, m) });
      copied += batch.messages.length;
    },
  });
  await until(() => copied >= count);
  await consumer.disconnect();
  await producer.disconnect();
}

async function abort(topic, transactionalId, values) {
  const producer = kafka.producer({ transactionalId, idempotent: true, maxInFlightRequests: 1 });
  await producer.connect();
  const transaction = await producer.transaction();
  const sent = await transaction.send({ topic, messages: values.map((value) => ({ value, partition: 0 })) });
  await transaction.abort();
  print({ aborted: sent.map((s) => ({ partition: s.partition, errorCode: s.errorCode, baseOffset: Number(s.baseOffset) })) });
  await producer.disconnect();
}

// A read_committed consumer (kafkajs's default) without a group's offsets: every record from
// the start, until COUNT have come and then QUIET_MS more with nothing new.
async function read(topic, count, quietMs) {
  const consumer = kafka.consumer({ groupId: `reader-${process.pid}`, readUncommitted: false,
    allowAutoTopicCreation: false, maxWaitTimeInMs: 100 });
  await consumer.connect();
  await consumer.subscribe({ topics: [topic], fromBeginning: true });
  const got = [];
  let last = Date.now();
  await consumer.run({
    autoCommit: false,
    eachMessage: async ({ partition, message }) => {
      got.push(record("reader", partition, message));
      last = Date.now();
    },
  });
  await until(() => got.length >= count && Date.now() - last >= quietMs);
  await consumer.disconnect();
  for (const r of got) print({ read: r });
}

// Two consumers of one group: each is assigned its share of the topic's PARTITIONS, and once
// the shares are disjoint and cover the topic it prints `ready` (the test then sends the
// records); each reads its partitions and commits what it read; together they read COUNT.
async function share(topic, groupId, partitions, count) {
  const members = ["a", "b"].map((name) => ({
    name, consumer: kafka.consumer({ groupId, readUncommitted: false, allowAutoTopicCreation: false,
      maxWaitTimeInMs: 100, ...GROUP_TIMEOUTS }), assigned: [],
  }));
  const got = [];
  for (const m of members) {
    m.consumer.on(m.consumer.events.GROUP_JOIN, (e) => {
      m.assigned = (e.payload.memberAssignment[topic] || []).slice().sort();
    });
    await m.consumer.connect();
    await m.consumer.subscribe({ topics: [topic], fromBeginning: true });
    await m.consumer.run({
      autoCommit: false,
      eachMessage: async ({ partition, message }) => {
        got.push(record(m.name, partition, message));
        await m.consumer.commitOffsets([{ topic, partition, offset: String(Number(message.offset) + 1) }]);
      },
    });
  }
  await until(() => {
    const all = members.flatMap((m) => m.assigned);
    return members.every((m) => m.assigned.length > 0) && all.length === partitions
      && new Set(all).size === partitions;
  });
  for (const m of members) print({ member: m.name, assigned: m.assigned });
  print({ ready: true });
  await until(() => got.length >= count);
  for (const r of got) print({ read: r });
  for (const m of members) await m.consumer.disconnect();
}

const commands = {
  copy: () => copy(args[0], args[1], args[2], args[3], Number(args[4])),
  abort: () => abort(args[0], args[1], args.slice(2)),
  read: () => read(args[0], Number(args[1]), Number(args[2])),
  share: () => share(args[0], args[1], Number(args[2]), Number(args[3])),
};

commands[command]().then(
  () => process.exit(0),
  (e) => {
    process.stderr.write(`${e.name}: ${e.message}\n${e.stack}\n`);
    process.exit(1);
  },
);
