package plot

import (
	"bytes"
	"image"
	"image/color"
	"image/png"
	"math"
	"strings"
	"testing"
)

// decode checks that data is a PNG of the given size and counts its pixels by colour.
func decode(t *testing.T, data []byte, width, height int) map[color.RGBA]int {
	t.Helper()
	img, err := png.Decode(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("output is not a PNG: %v", err)
	}
	if got := img.Bounds(); got != image.Rect(0, 0, width, height) {
		t.Fatalf("image bounds %v, want %dx%d", got, width, height)
	}
	counts := map[color.RGBA]int{}
	for y := range height {
		for x := range width {
			r, g, b, a := img.At(x, y).RGBA()
			counts[color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}]++
		}
	}
	return counts
}

func ptr(v float64) *float64 { return &v }

func TestLinesDrawsEverySeriesInItsColour(t *testing.T) {
	xs := []float64{0, 1, 2, 3, 4, 5}
	chart := Lines{
		Title: "hit ratio per tenant", XLabel: "interval", YLabel: "hit ratio",
		Series: []Series{
			{Name: "team-a", X: xs, Y: []float64{0.1, 0.5, 0.7, 0.8, 0.82, 0.83}, Target: ptr(0.8)},
			{Name: "team-b", X: xs, Y: []float64{0.2, 0.3, math.NaN(), 0.4, 0.45, 0.5}, Target: ptr(0.4)},
			{Name: "team-c", X: xs, Y: []float64{0.9, 0.9, 0.9, 0.9, 0.9, 0.9}},
		},
	}
	var buf bytes.Buffer
	if err := chart.WritePNG(&buf, 640, 360); err != nil {
		t.Fatal(err)
	}
	counts := decode(t, buf.Bytes(), 640, 360)
	for i := range chart.Series {
		if counts[Color(i)] < 100 {
			t.Errorf("series %d colour %v covers %d pixels, want a drawn line", i, Color(i), counts[Color(i)])
		}
	}
	if counts[black] < 200 {
		t.Errorf("only %d black pixels: axes and text missing", counts[black])
	}
	var again bytes.Buffer
	if err := chart.WritePNG(&again, 640, 360); err != nil || !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Errorf("the same chart encoded differently (err %v)", err)
	}
}

func TestDashedTargetIsDrawn(t *testing.T) {
	// A series whose only point sits below the range still shows its target line.
	chart := Lines{Series: []Series{{Name: "a", X: []float64{0}, Y: []float64{math.NaN()}, Target: ptr(0.5)}}, YMin: ptr(0), YMax: ptr(1)}
	var buf bytes.Buffer
	if err := chart.WritePNG(&buf, 300, 200); err != nil {
		t.Fatal(err)
	}
	if n := decode(t, buf.Bytes(), 300, 200)[Color(0)]; n < 50 {
		t.Fatalf("target line covers %d pixels", n)
	}
}

func TestBarsDrawEverySeries(t *testing.T) {
	chart := Bars{
		Title: "SLO attainment", YLabel: "fraction",
		Categories: []string{"shared", "equal", "softqos", "optimal"},
		Series: []BarSeries{
			{Name: "team-a", Values: []float64{0.2, 0.5, 1, 1}},
			{Name: "team-b", Values: []float64{1, 1, 0.9, 1}},
		},
	}
	var buf bytes.Buffer
	if err := chart.WritePNG(&buf, 500, 300); err != nil {
		t.Fatal(err)
	}
	counts := decode(t, buf.Bytes(), 500, 300)
	for i := range chart.Series {
		if counts[Color(i)] < 500 {
			t.Errorf("bar series %d colour covers %d pixels", i, counts[Color(i)])
		}
	}
}

func TestBadChartsAreRejected(t *testing.T) {
	tests := []struct {
		name  string
		write func() error
		want  string
	}{
		{"too small", func() error { return Lines{Series: []Series{{}}}.WritePNG(&bytes.Buffer{}, 10, 10) }, "size 10x10"},
		{"no series", func() error { return Lines{}.WritePNG(&bytes.Buffer{}, 300, 200) }, "no series"},
		{"length mismatch", func() error {
			return Lines{Series: []Series{{Name: "a", X: []float64{1, 2}, Y: []float64{1}}}}.WritePNG(&bytes.Buffer{}, 300, 200)
		}, `series 0 ("a") has 2 x values and 1 y values`},
		{"infinite y", func() error {
			return Lines{Series: []Series{{Name: "a", X: []float64{1}, Y: []float64{math.Inf(1)}}}}.WritePNG(&bytes.Buffer{}, 300, 200)
		}, "point 0"},
		{"NaN target", func() error {
			return Lines{Series: []Series{{Name: "a", Target: ptr(math.NaN())}}}.WritePNG(&bytes.Buffer{}, 300, 200)
		}, "target NaN"},
		{"inverted range", func() error {
			return Lines{Series: []Series{{Name: "a"}}, YMin: ptr(1), YMax: ptr(0)}.WritePNG(&bytes.Buffer{}, 300, 200)
		}, "YMin 1 must be below YMax 0"},
		{"bar count mismatch", func() error {
			return Bars{Categories: []string{"x", "y"}, Series: []BarSeries{{Name: "a", Values: []float64{1}}}}.WritePNG(&bytes.Buffer{}, 300, 200)
		}, "has 1 values for 2 categories"},
		{"no bars", func() error { return Bars{}.WritePNG(&bytes.Buffer{}, 300, 200) }, "at least one series"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.write(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestNiceTicks(t *testing.T) {
	tests := []struct {
		r      axisRange
		n      int
		labels string
	}{
		{axisRange{0, 1}, 5, "0.0 0.2 0.4 0.6 0.8 1.0"},
		{axisRange{0.13, 0.91}, 5, "0.2 0.4 0.6 0.8"},
		{axisRange{0, 19}, 8, "0.0 2.5 5.0 7.5 10.0 12.5 15.0 17.5"},
		{axisRange{-3, 12}, 5, "0 5 10"},
		{axisRange{0, 0.004}, 4, "0.000 0.001 0.002 0.003 0.004"},
	}
	for _, tc := range tests {
		ticks, step := niceTicks(tc.r, tc.n)
		var labels []string
		for _, v := range ticks {
			labels = append(labels, formatTick(v, step))
		}
		if got := strings.Join(labels, " "); got != tc.labels {
			t.Errorf("niceTicks(%v, %d) labels %q, want %q", tc.r, tc.n, got, tc.labels)
		}
	}
}
