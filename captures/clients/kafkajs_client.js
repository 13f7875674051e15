// kafkajs driver for captures/make_captures.py: reads one JSON job on stdin, runs it against the
// broker and prints what the client saw (the truth) as one JSON object on stdout. Client errors
// are recorded, not fatal, so the scenario keeps the capture of whatever happened on the wire.
'use strict'

const { Kafka, CompressionTypes, CompressionCodecs, logLevel } = require('kafkajs')

const CODECS = {
  none: CompressionTypes.None,
  gzip: CompressionTypes.GZIP,
  snappy: CompressionTypes.Snappy,
}

function readStdin () {
  return new Promise((resolve) => {
    let data = ''
    process.stdin.on('data', (c) => { data += c })
    process.stdin.on('end', () => resolve(JSON.parse(data)))
  })
}

function text (buf) {
  return buf === null || buf === undefined ? null : buf.toString('utf8')
}

async function produce (kafka, job, out) {
  const producer = kafka.producer({ idempotent: !!job.idempotent, maxInFlightRequests: 1 })
  await producer.connect()
  try {
    for (const step of job.produce) {
      const messages = step.records.map((r) => ({
        key: r.key,
        value: r.value,
        partition: step.partition,
        headers: Object.fromEntries(r.headers),
      }))
      try {
        const res = await producer.send({
          topic: step.topic, acks: -1, compression: CODECS[step.codec], messages,
        })
        // one result per partition: baseOffset of the batch, records numbered from it
        const base = Number(res[0].baseOffset)
        step.records.forEach((r, i) => out.produced.push({
          codec: step.codec, topic: step.topic, partition: step.partition, key: r.key,
          value: r.value, headers: r.headers, offset: base + i, timestamp_ms: null, error: null,
        }))
      } catch (e) {
        out.errors.push(`produce ${step.codec}: ${e.message}`)
        step.records.forEach((r) => out.produced.push({
          codec: step.codec, topic: step.topic, partition: step.partition, key: r.key,
          value: r.value, headers: r.headers, offset: null, timestamp_ms: null, error: e.message,
        }))
      }
    }
  } finally {
    await producer.disconnect()
  }
}

async function consume (kafka, job, out) {
  const consumer = kafka.consumer({
    groupId: job.group, sessionTimeout: 6000, rebalanceTimeout: 6000, heartbeatInterval: 1000,
  })
  await consumer.connect()
  const last = {}
  let done
  const finished = new Promise((resolve) => { done = resolve })
  try {
    await consumer.subscribe({ topics: job.consume_topics, fromBeginning: true })
    await consumer.run({
      autoCommit: false,
      eachMessage: async ({ topic, partition, message }) => {
        const headers = Object.entries(message.headers || {}).map(([k, v]) => [k, text(v)])
        out.consumed.push({
          topic, partition, offset: Number(message.offset), key: text(message.key),
          value: text(message.value), headers, timestamp_ms: Number(message.timestamp),
        })
        last[`${topic}\u0000${partition}`] = Number(message.offset)
        if (out.consumed.length >= job.consume) done()
      },
    })
    await Promise.race([finished, new Promise((resolve) => setTimeout(resolve, 20000))])
    if (out.consumed.length < job.consume) out.errors.push('consume: timed out')
    const offsets = Object.entries(last).map(([tp, off]) => {
      const [topic, partition] = tp.split('\u0000')
      return { topic, partition: Number(partition), offset: String(off + 1) }
    })
    if (offsets.length) await consumer.commitOffsets(offsets)
  } catch (e) {
    out.errors.push(`consume: ${e.message}`)
  } finally {
    await consumer.disconnect()
  }
}

async function admin (kafka, job, out) {
  const a = kafka.admin()
  await a.connect()
  const op = async (name, fn) => {
    try {
      out.admin.push({ op: name, ok: true, result: await fn() })
    } catch (e) {
      out.admin.push({ op: name, ok: false, error: e.message })
    }
  }
  try {
    if (job.new_topic) {
      await op(`create_topics ${job.new_topic}`, () => a.createTopics({
        topics: [{ topic: job.new_topic, numPartitions: 2, replicationFactor: 1 }],
        waitForLeaders: true,
      }))
    }
    await op('list_topics', async () => (await a.listTopics()).sort())
    await op('fetch_topic_metadata', async () => (await a.fetchTopicMetadata({
      topics: job.consume_topics,
    })).topics.map((t) => [t.name, t.partitions.length]))
    await op('describe_cluster', async () => (await a.describeCluster()).brokers.length)
    await op('describe_configs', async () => (await a.describeConfigs({
      resources: [{ type: 2, name: job.consume_topics[0] }], includeSynonyms: false,
    })).resources.map((r) => [r.resourceName, r.errorCode]))
    await op('list_groups', async () => (await a.listGroups()).groups.map((g) => g.groupId).sort())
    await op(`fetch_topic_offsets ${job.consume_topics[0]}`, async () => (await a.fetchTopicOffsets(
      job.consume_topics[0])).map((p) => [p.partition, Number(p.low), Number(p.high)]))
    await op(`fetch_topic_offsets_by_timestamp ${job.consume_topics[0]}`, async () => (
      await a.fetchTopicOffsetsByTimestamp(job.consume_topics[0], 0)).map((p) => [
      p.partition, Number(p.offset)]))
    if (job.new_topic) {
      await op(`alter_configs ${job.new_topic}`, () => a.alterConfigs({
        validateOnly: false,
        resources: [{ type: 2, name: job.new_topic, configEntries: [
          { name: 'retention.ms', value: '3600000' }] }],
      }).then((r) => r.resources.map((x) => [x.resourceName, x.errorCode])))
      await op(`create_partitions ${job.new_topic}`, () => a.createPartitions({
        topicPartitions: [{ topic: job.new_topic, count: 3 }],
      }))
      await op(`delete_topics ${job.new_topic}`, () => a.deleteTopics({ topics: [job.new_topic] }))
    }
    if (job.group) {
      await op('describe_groups', async () => (await a.describeGroups([job.group])).groups.map(
        (g) => [g.groupId, g.state, g.members.length]))
      for (const topic of job.consume_topics) {
        await op(`fetch_offsets ${topic}`, async () => {
          const res = await a.fetchOffsets({ groupId: job.group, topics: [topic] })
          res[0].partitions.forEach((p) => out.committed.push({
            group: job.group, topic, partition: p.partition, offset: Number(p.offset),
          }))
          return res[0].partitions.map((p) => [p.partition, Number(p.offset)])
        })
      }
    }
  } finally {
    await a.disconnect()
  }
}

async function main () {
  const job = await readStdin()
  if (job.snappy) CompressionCodecs[CompressionTypes.Snappy] = require('kafkajs-snappy')
  const kafka = new Kafka({
    clientId: job.client_id, brokers: [job.bootstrap], logLevel: logLevel.NOTHING,
    retry: { retries: 2, initialRetryTime: 100 },
  })
  const out = { produced: [], consumed: [], committed: [], admin: [], errors: [],
    version: require('kafkajs/package.json').version }
  try {
    if (job.produce && job.produce.length) await produce(kafka, job, out)
    if (job.consume) await consume(kafka, job, out)
    if (job.admin) await admin(kafka, job, out)
  } catch (e) {
    out.errors.push(`job: ${e.message}`)
  }
  process.stdout.write(JSON.stringify(out) + '\n')
}

main()
