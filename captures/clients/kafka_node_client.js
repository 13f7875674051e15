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
  } catch (e) {
    out.errors.push(`job: ${e.message || e}`)
  } finally {
    await call((cb) => client.close(() => cb(null)))
  }
  process.stdout.write(JSON.stringify(out) + '\n')
}

main()
