package outbox

import (
	"bytes"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/outboxd/outboxd/source"
)

// FuzzCanonicalID checks event id canonicalisation against google/uuid's parser: 16 raw bytes
// become their uuid text; 32 hex digits or 36-character uuid text (any case) that uuid.ParseBytes
// accepts become its lower-case text; anything else passes through unchanged. Canonical text
// passes through without a copy, canonicalising twice changes nothing, and Route puts exactly
// the canonical id in the record's "id" header.
func FuzzCanonicalID(f *testing.F) {
	for _, s := range []string{
		"6d3f1c2e-5a4b-4c3d-9e8f-0a1b2c3d4e5f", "6D3F1C2E-5A4B-4C3D-9E8F-0A1B2C3D4E5F", "6d3f1c2e5a4b4c3d9e8f0a1b2c3d4e5f",
		"\x00\x11\x22\x33\x44\x55\x66\x77\x88\x99\xaa\xbb\xcc\x00\x00\x00", "order-42", "", "{6d3f1c2e-5a4b-4c3d-9e8f-0a1b2c3d4e5f}",
		"6d3f1c2e-5a4b-4c3d-9e8f-0a1b2c3d4e5g", "6D3F1C2E-5A4B-4C3D-9E8F-0A1B2C3D4E5G", "6d3f1c2e+5a4b-4c3d-9e8f-0a1b2c3d4e5f",
		"urn:uuid:6d3f1c2e-5a4b-4c3d-9e8f-0a1b2c3d4e5f", "6d3f1c2e5a4b4c3d9e8f0a1b2c3d4e5z", "------------------------------------",
	} {
		f.Add([]byte(s))
	}
	router, err := New(DefaultConfig())
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, id []byte) {
		in := bytes.Clone(id)
		got := canonicalID(id)
		if !bytes.Equal(id, in) {
			t.Fatalf("canonicalID(%q) modified its input to %q", in, id)
		}
		want := in
		switch len(in) {
		case 16:
			want = []byte(uuid.UUID(in).String())
		case 32, 36:
			if u, err := uuid.ParseBytes(in); err == nil {
				want = []byte(u.String())
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("canonicalID(%q) = %q, want %q", in, got, want)
		}
		if again := canonicalID(got); !bytes.Equal(again, got) {
			t.Fatalf("canonicalID is not idempotent: %q -> %q -> %q", in, got, again)
		}
		if len(in) == 36 && bytes.Equal(got, in) && len(got) > 0 && &got[0] != &id[0] {
			t.Fatalf("canonicalID(%q) copied an id it leaves unchanged", in)
		}
		row := source.Row{Table: "public.outbox", Columns: []string{"id", "aggregatetype", "aggregateid", "type", "payload"},
			Values: []source.Value{{Bytes: id}, {Bytes: []byte("order")}, {Bytes: []byte("a-1")}, {Bytes: []byte("t")}, {Bytes: []byte("{}")}}}
		rec, err := router.Route(&row, time.Time{})
		if err != nil || len(rec.Headers) == 0 || rec.Headers[0].Key != "id" || !bytes.Equal(rec.Headers[0].Value, want) {
			t.Fatalf("Route with id %q: headers %+v, %v; want id %q", in, rec.Headers, err, want)
		}
	})
}
