package nsinit

import (
	"errors"
	"reflect"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/wire/wiretest"
)

// TestMessageLayout: the encoding's layout is Message's own; a field added
// to Message fails here until marshal, unmarshal and messageLayout carry it.
func TestMessageLayout(t *testing.T) {
	if got := wiretest.Layout(reflect.TypeFor[Message]()); got != messageLayout {
		t.Errorf("Message changed: update marshal, unmarshal and messageLayout to\n%s", got)
	}
}

// TestMessageEveryField: a message with every field set comes back equal,
// and every truncation of it, another build's tag and a trailing byte are
// refused, never half decoded.
func TestMessageEveryField(t *testing.T) {
	var m Message
	wiretest.Fill(&m)
	b := m.marshal()
	var got Message
	if err := got.unmarshal(b); err != nil || !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, m)
	}
	for i := range len(b) {
		var q Message
		if err := q.unmarshal(b[:i]); err == nil || !reflect.DeepEqual(q, Message{}) {
			t.Fatalf("unmarshal of %d of %d bytes = %+v, %v; want an error and nothing set", i, len(b), q, err)
		}
	}
	other := append([]byte{}, b...)
	other[len("xairlock-control ")] ^= 0xff
	if err := got.unmarshal(other); !errors.Is(err, errMessageBuild) {
		t.Errorf("unmarshal of another build's message = %v, want %v", err, errMessageBuild)
	}
	if err := got.unmarshal(append(b, 0)); err == nil {
		t.Error("unmarshal with a trailing byte = nil, want an error")
	}
}
