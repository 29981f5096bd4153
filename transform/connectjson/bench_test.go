package connectjson

import (
	"fmt"
	"strings"
	"testing"
)

var orderPayload = []byte(`{"id": 1, "lineItems": [{"id": 1, "item": "Debezium in Action", "status": "ENTERED", "quantity": 2, "totalPrice": 39.98}], "orderDate": "2019-01-31T12:13:01", "customerId": 123}`)

func BenchmarkAppendString(b *testing.B) {
	s := []byte(strings.Repeat(`plain ascii text with "quotes", é and 😀 `, 25))
	b.SetBytes(int64(len(s)))
	var buf []byte
	for b.Loop() {
		buf = AppendString(buf[:0], s)
	}
}

func BenchmarkAppendDouble(b *testing.B) {
	var buf []byte
	for b.Loop() {
		buf = AppendDouble(buf[:0], 39.98)
	}
}

// BenchmarkExpandOrder: the docs' Order payload expanded and written schemas off.
func BenchmarkExpandOrder(b *testing.B) {
	b.SetBytes(int64(len(orderPayload)))
	var buf []byte
	for b.Loop() {
		v, s, err := Expand(orderPayload, ExpandOptions{Name: "payload"})
		if err != nil {
			b.Fatal(err)
		}
		if buf, err = AppendValue(buf[:0], v, s); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkExpandWide: one object with n keys and an array of n/10 objects of one schema; MB/s
// should stay about flat from n=2000 to n=20000 (no quadratic key or schema lookups). An array of
// objects with distinct schemas is quadratic by Debezium's semantics: every element gets every
// field of the merged schema, so the output itself grows with elements × fields.
func BenchmarkExpandWide(b *testing.B) {
	for _, n := range []int{2000, 20000} {
		var sb strings.Builder
		sb.WriteString(`{`)
		for i := 0; i < n; i++ {
			fmt.Fprintf(&sb, `"k%d":%d,`, i, i)
		}
		sb.WriteString(`"arr":[`)
		for i := 0; i < n/10; i++ {
			if i > 0 {
				sb.WriteString(",")
			}
			fmt.Fprintf(&sb, `{"f":%d,"g":"x"}`, i)
		}
		sb.WriteString(`]}`)
		p := []byte(sb.String())
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			b.SetBytes(int64(len(p)))
			for b.Loop() {
				if _, _, err := Expand(p, ExpandOptions{Name: "payload"}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
