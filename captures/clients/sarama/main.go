// Command sarama_client drives the Sarama Go client (Debian's 1.22) for captures/make_captures.py:
// it reads one JSON job on stdin, runs it against the broker and prints what the client saw as
// one JSON object on stdout (the truth). Errors are recorded in the output, never fatal, so a
// scenario keeps the capture of whatever happened on the wire.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/Shopify/sarama"
)

type record struct {
	Key     string      `json:"key"`
	Value   string      `json:"value"`
	Headers [][2]string `json:"headers"`
}

// step is one producer (one compression codec) sending its records to partition 0 of a topic
type step struct {
	Codec   string   `json:"codec"`
	Topic   string   `json:"topic"`
	Records []record `json:"records"`
}

type job struct {
	Bootstrap string `json:"bootstrap"`
	ClientID  string `json:"client_id"`
	Steps     []step `json:"produce"`
	// Consume names topics read from partition 0 up to the number of records produced there
	Consume []string `json:"consume"`
	Group   string   `json:"group"`
	// JoinGroup names topics a consumer group member subscribes to (one attempt, no retries)
	JoinGroup []string `json:"join_group"`
	Admin     bool     `json:"admin"`
	NewTopic  string   `json:"new_topic"`
}

type out struct {
	Produced  []map[string]interface{} `json:"produced"`
	Consumed  []map[string]interface{} `json:"consumed"`
	Committed []map[string]interface{} `json:"committed"`
	Admin     []map[string]interface{} `json:"admin"`
	Errors    []string                 `json:"errors"`
	Version   string                   `json:"kafka_version"`
}

var codecs = map[string]sarama.CompressionCodec{
	"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
	"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4,
	"zstd": sarama.CompressionZSTD,
}

func config(j job, codec string) *sarama.Config {
	c := sarama.NewConfig()
	// 2.1 is the oldest protocol level with zstd (Produce v7, Fetch v10)
	c.Version = sarama.V2_1_0_0
	c.ClientID = j.ClientID
	c.Producer.Return.Successes = true
	c.Producer.RequiredAcks = sarama.WaitForAll
	c.Producer.Compression = codecs[codec]
	c.Producer.Flush.Messages = 1000
	c.Producer.Flush.Frequency = 50 * time.Millisecond
	c.Consumer.Return.Errors = true
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Metadata.Retry.Max = 1
	return c
}

func produce(j job, st step, o *out) {
	p, err := sarama.NewSyncProducer([]string{j.Bootstrap}, config(j, st.Codec))
	if err != nil {
		o.Errors = append(o.Errors, "producer: "+err.Error())
		return
	}
	defer p.Close()
	msgs := make([]*sarama.ProducerMessage, 0, len(st.Records))
	for _, r := range st.Records {
		m := &sarama.ProducerMessage{Topic: st.Topic, Partition: 0,
			Key: sarama.StringEncoder(r.Key), Value: sarama.StringEncoder(r.Value)}
		for _, h := range r.Headers {
			m.Headers = append(m.Headers, sarama.RecordHeader{Key: []byte(h[0]), Value: []byte(h[1])})
		}
		msgs = append(msgs, m)
	}
	err = p.SendMessages(msgs)
	failed := map[*sarama.ProducerMessage]string{}
	if errs, ok := err.(sarama.ProducerErrors); ok {
		for _, e := range errs {
			failed[e.Msg] = e.Err.Error()
		}
	} else if err != nil {
		o.Errors = append(o.Errors, "produce: "+err.Error())
	}
	for i, m := range msgs {
		e := map[string]interface{}{"codec": st.Codec, "topic": m.Topic,
			"partition": m.Partition, "key": st.Records[i].Key, "value": st.Records[i].Value,
			"headers": st.Records[i].Headers, "offset": m.Offset, "timestamp_ms": nil, "error": nil}
		if msg, bad := failed[m]; bad {
			e["offset"], e["error"] = nil, msg
		} else if err != nil && len(failed) == 0 {
			e["offset"], e["error"] = nil, err.Error()
		}
		o.Produced = append(o.Produced, e)
	}
}

func consume(j job, topic string, want int, o *out) {
	client, err := sarama.NewClient([]string{j.Bootstrap}, config(j, "none"))
	if err != nil {
		o.Errors = append(o.Errors, "client: "+err.Error())
		return
	}
	defer client.Close()
	cons, err := sarama.NewConsumerFromClient(client)
	if err != nil {
		o.Errors = append(o.Errors, "consumer: "+err.Error())
		return
	}
	pc, err := cons.ConsumePartition(topic, 0, sarama.OffsetOldest)
	if err != nil {
		o.Errors = append(o.Errors, "consume: "+err.Error())
		cons.Close()
		return
	}
	last, got := int64(-1), 0
	deadline := time.After(15 * time.Second)
loop:
	for got < want {
		select {
		case m := <-pc.Messages():
			hs := [][2]string{}
			for _, h := range m.Headers {
				hs = append(hs, [2]string{string(h.Key), string(h.Value)})
			}
			o.Consumed = append(o.Consumed, map[string]interface{}{"topic": m.Topic,
				"partition": m.Partition, "offset": m.Offset, "key": string(m.Key),
				"value": string(m.Value), "headers": hs,
				"timestamp_ms": m.Timestamp.UnixNano() / 1e6})
			last, got = m.Offset, got+1
		case e := <-pc.Errors():
			o.Errors = append(o.Errors, "consume: "+e.Error())
		case <-deadline:
			o.Errors = append(o.Errors, "consume: timed out")
			break loop
		}
	}
	pc.Close()
	cons.Close()
	if j.Group == "" || last < 0 {
		return
	}
	// a simple-consumer commit (generation -1, no member id) straight to the coordinator: the
	// offset manager retries a refused commit forever; here the answer is recorded instead
	coord, err := client.Coordinator(j.Group)
	if err != nil {
		o.Errors = append(o.Errors, "coordinator: "+err.Error())
		return
	}
	commit := &sarama.OffsetCommitRequest{Version: 2, ConsumerGroup: j.Group,
		ConsumerGroupGeneration: -1, RetentionTime: -1}
	commit.AddBlock(topic, 0, last+1, 0, "")
	cresp, err := coord.CommitOffset(commit)
	if err != nil {
		o.Errors = append(o.Errors, "offset commit: "+err.Error())
		return
	}
	if kerr := cresp.Errors[topic][0]; kerr != sarama.ErrNoError {
		o.Errors = append(o.Errors, "offset commit: "+kerr.Error())
	}
	req := &sarama.OffsetFetchRequest{Version: 1, ConsumerGroup: j.Group}
	req.AddPartition(topic, 0)
	resp, err := coord.FetchOffset(req)
	if err != nil {
		o.Errors = append(o.Errors, "offset fetch: "+err.Error())
		return
	}
	if b := resp.GetBlock(topic, 0); b != nil {
		o.Committed = append(o.Committed, map[string]interface{}{"group": j.Group,
			"topic": topic, "partition": 0, "offset": b.Offset})
	}
}

// groupHandler consumes nothing: the group session is only there to see the join on the wire
type groupHandler struct{}

func (groupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (groupHandler) ConsumeClaim(sarama.ConsumerGroupSession, sarama.ConsumerGroupClaim) error {
	return nil
}

// joinGroup tries once to join j.Group as a consumer group member; Sarama 1.22 speaks JoinGroup
// v1 and gives up on an error it does not know (such as MEMBER_ID_REQUIRED)
func joinGroup(j job, o *out) {
	c := config(j, "none")
	c.Consumer.Group.Rebalance.Retry.Max = 0
	group, err := sarama.NewConsumerGroup([]string{j.Bootstrap}, j.Group, c)
	if err != nil {
		o.Errors = append(o.Errors, "consumer group: "+err.Error())
		return
	}
	defer group.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = group.Consume(ctx, j.JoinGroup, groupHandler{})
	e := map[string]interface{}{"client": j.ClientID, "op": "join_group " + j.Group, "ok": err == nil}
	if err != nil {
		e["error"] = err.Error()
	}
	o.Admin = append(o.Admin, e)
}

func admin(j job, o *out) {
	ca, err := sarama.NewClusterAdmin([]string{j.Bootstrap}, config(j, "none"))
	topic := j.Consume[0]
	if err != nil {
		o.Errors = append(o.Errors, "admin: "+err.Error())
		return
	}
	defer ca.Close()
	add := func(op string, result interface{}, err error) {
		e := map[string]interface{}{"client": j.ClientID, "op": op, "ok": err == nil}
		if err != nil {
			e["error"] = err.Error()
		} else {
			e["result"] = result
		}
		o.Admin = append(o.Admin, e)
	}
	if j.NewTopic != "" {
		err := ca.CreateTopic(j.NewTopic, &sarama.TopicDetail{NumPartitions: 3, ReplicationFactor: 1}, false)
		add("create_topic "+j.NewTopic, 3, err)
	}
	topics, err := ca.ListTopics()
	names := map[string]int32{}
	for n, d := range topics {
		names[n] = d.NumPartitions
	}
	add("list_topics", names, err)
	md, err := ca.DescribeTopics([]string{topic})
	parts := 0
	if err == nil && len(md) == 1 {
		parts = len(md[0].Partitions)
	}
	add("describe_topics "+topic, parts, err)
	entries, err := ca.DescribeConfig(sarama.ConfigResource{Type: sarama.TopicResource, Name: topic})
	add("describe_config "+topic, len(entries), err)
	groups, err := ca.ListConsumerGroups()
	add("list_consumer_groups", groups, err)
	if j.Group != "" {
		gd, err := ca.DescribeConsumerGroups([]string{j.Group})
		states := []string{}
		for _, g := range gd {
			states = append(states, g.GroupId+":"+g.State)
		}
		add("describe_consumer_groups", states, err)
		off, err := ca.ListConsumerGroupOffsets(j.Group, map[string][]int32{topic: {0}})
		var got interface{}
		if err == nil {
			if b := off.GetBlock(topic, 0); b != nil {
				got = b.Offset
			}
		}
		add("list_consumer_group_offsets "+j.Group, got, err)
	}
}

func main() {
	if os.Getenv("SARAMA_DEBUG") != "" {
		sarama.Logger = log.New(os.Stderr, "[sarama] ", log.Lmicroseconds)
	}
	var j job
	if err := json.NewDecoder(os.Stdin).Decode(&j); err != nil {
		fmt.Fprintln(os.Stderr, "bad job:", err)
		os.Exit(2)
	}
	o := &out{Produced: []map[string]interface{}{}, Consumed: []map[string]interface{}{},
		Committed: []map[string]interface{}{}, Admin: []map[string]interface{}{},
		Errors: []string{}, Version: sarama.V2_1_0_0.String()}
	produced := map[string]int{}
	for _, st := range j.Steps {
		produce(j, st, o)
		produced[st.Topic] += len(st.Records)
	}
	for _, topic := range j.Consume {
		consume(j, topic, produced[topic], o)
	}
	if len(j.JoinGroup) > 0 {
		joinGroup(j, o)
	}
	if j.Admin && len(j.Consume) > 0 {
		admin(j, o)
	}
	if err := json.NewEncoder(os.Stdout).Encode(o); err != nil {
		os.Exit(1)
	}
}
