// kafka-node driver for captures/make_captures.py: reads one JSON job on stdin, runs it against
// the broker and prints what the client saw (the truth) as one JSON object on stdout. kafka-node
// (5.0, unmaintained) speaks old protocol versions; client errors are recorded, not fatal.
'use strict'

const kafka = require('kafka-node')

function readStdin () {
  return new Promise((resolve) => {
    let data = ''
    process.stdin.on('data', (c) => { data += c })
    process.stdin.on('end', () => resolve(JSON.parse(data)))
  })
}

const CODECS = { none: 0, gzip: 1, snappy: 2 }

function call (fn) {
  return new Promise((resolve) => fn((err, res) => resolve([err, res])))
}

// records written before the capture by another client, read from offset 0 of partition 0;
// then the position is committed for job.group (OffsetCommit) and read back (OffsetFetch)
async function consume (client, job, out) {
  const consumer = new kafka.Consumer(client, [{ topic: job.topic, partition: 0, offset: 0 }], {
    groupId: job.group, autoCommit: false, fromOffset: true, fetchMaxWaitMs: 200,
  })
  let done = false
  await new Promise((resolve) => {
    const timer = setTimeout(() => {
      out.errors.push('consume: timed out')
      resolve()
    }, 5000)
    consumer.on('message', (m) => {
      out.consumed.push({
        topic: m.topic, partition: m.partition, offset: m.offset, key: m.key, value: m.value,
        headers: [], timestamp_ms: m.timestamp ? new Date(m.timestamp).getTime() : null,
      })
      if (out.consumed.length >= job.consume) {
        clearTimeout(timer)
        resolve()
      }
    })
    // kafka-node fetches again at once after a failed fetch: stop at the first error
    consumer.on('error', (e) => {
      if (!done) out.errors.push(`consume: ${e.message || e}`)
      clearTimeout(timer)
      resolve()
    })
  })
  done = true
  consumer.pause()
  const next = out.consumed.length ? out.consumed[out.consumed.length - 1].offset + 1 : 0
  consumer.setOffset(job.topic, 0, next)
  const [cErr] = await call((cb) => consumer.commit(true, cb))
  if (cErr) out.errors.push(`commit: ${cErr.message || cErr}`)
  const offset = new kafka.Offset(client)
  const [fErr, got] = await call((cb) => offset.fetchCommitsV1(job.group, [
    { topic: job.topic, partition: 0 },
  ], cb))
  if (fErr) {
    out.errors.push(`offset fetch: ${fErr.message || fErr}`)
  } else {
    out.committed.push({ group: job.group, topic: job.topic, partition: 0,
      offset: got[job.topic][0] })
  }
  await call((cb) => consumer.close(false, () => cb(null)))
}

async function admin (client, job, out) {
  const a = new kafka.Admin(client)
  const op = async (name, fn) => {
    const [err, res] = await call(fn)
    out.admin.push(err ? { op: name, ok: false, error: String(err.message || err) }
      : { op: name, ok: true, result: res })
  }
  await op('list_groups', (cb) => a.listGroups(cb))
  await op('describe_groups', (cb) => a.describeGroups([job.group], (err, res) => cb(err,
    res && Object.values(res).map((g) => [g.groupId, g.state]))))
  await op('describe_configs', (cb) => a.describeConfigs({
    resources: [{ resourceType: 'topic', resourceName: job.topic, configNames: [] }],
    includeSynonyms: false,
  }, (err, res) => cb(err, res && res.map((r) => [r.resourceName, r.configEntries.length]))))
}

async function main () {
  const job = await readStdin()
  const out = { produced: [], consumed: [], committed: [], admin: [], errors: [],
    version: require('kafka-node/package.json').version }
  const client = new kafka.KafkaClient({
    kafkaHost: job.bootstrap, clientId: job.client_id, connectTimeout: 3000, requestTimeout: 5000,
    versions: { disabled: !job.api_versions },
  })
  try {
    const [readyErr] = await call((cb) => client.once('ready', () => cb(null)) &&
      client.once('error', (e) => cb(e)))
    if (readyErr) throw readyErr
    const [mErr, md] = await call((cb) => client.loadMetadataForTopics([job.topic], cb))
    out.admin.push(mErr ? { op: 'metadata', ok: false, error: String(mErr) }
      : { op: 'metadata', ok: true, result: Object.keys(md[1].metadata).sort() })
    const producer = new kafka.Producer(client, { requireAcks: -1, ackTimeoutMs: 3000 })
    for (const step of job.produce || []) {
      const messages = step.records.map((r) => new kafka.KeyedMessage(r.key, r.value))
      const [err, res] = await call((cb) => producer.send([{
        topic: step.topic, partition: 0, messages, attributes: CODECS[step.codec],
      }], cb))
      const base = err ? null : res[step.topic][0]
      step.records.forEach((r, i) => out.produced.push({
        codec: step.codec, topic: step.topic, partition: 0, key: r.key, value: r.value,
        headers: [], offset: base === null ? null : base + i, timestamp_ms: null,
        error: err ? String(err.message || err) : null,
      }))
    }
    const offset = new kafka.Offset(client)
    const [oErr, offs] = await call((cb) => offset.fetchLatestOffsets([job.topic], cb))
    out.admin.push(oErr ? { op: 'latest_offsets', ok: false, error: String(oErr.message || oErr) }
      : { op: 'latest_offsets', ok: true, result: offs[job.topic] })
    if (job.admin) await admin(client, job, out)
    // last: closing kafka-node's consumer closes its client
    if (job.consume) await consume(client, job, out)
  } catch (e) {
    out.errors.push(`job: ${e.message || e}`)
  } finally {
    await call((cb) => client.close(() => cb(null)))
  }
  process.stdout.write(JSON.stringify(out) + '\n')
}

main()
