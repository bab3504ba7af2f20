// Package plot draws small PNG charts with the standard library's image packages and one
// bitmap font: line charts (several series over time, each with an optional dashed target
// line in its own colour) and grouped bar charts. It is what the simulator's evaluation report
// and the demo use to show each tenant's hit ratio against its target over time.
//
//	target := 0.8
//	chart := plot.Lines{
//		Title: "hit ratio", XLabel: "interval", YLabel: "hit ratio",
//		Series: []plot.Series{{Name: "team-a", X: xs, Y: ys, Target: &target}},
//	}
//	err := chart.WritePNG(w, 800, 400)
//
// Series i is drawn in Color(i). Y values that are NaN leave a gap in a line (a tenant that
// was not active); infinite values are an error. Output is deterministic: the same chart gives
// the same bytes.
package plot

import (
	"errors"
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"
	"strconv"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Size bounds for WritePNG.
const (
	MinWidth, MinHeight = 200, 150
	MaxWidth, MaxHeight = 8000, 8000
)

// palette is a set of colours distinguishable on white (Tableau 10).
var palette = []color.RGBA{
	{31, 119, 180, 255}, {255, 127, 14, 255}, {44, 160, 44, 255}, {214, 39, 40, 255},
	{148, 103, 189, 255}, {140, 86, 75, 255}, {227, 119, 194, 255}, {127, 127, 127, 255},
	{188, 189, 34, 255}, {23, 190, 207, 255},
}

// Color returns the colour of series i (the palette repeats after 10 series).
func Color(i int) color.RGBA { return palette[i%len(palette)] }

var (
	white     = color.RGBA{255, 255, 255, 255}
	black     = color.RGBA{0, 0, 0, 255}
	gridColor = color.RGBA{225, 225, 225, 255}
	face      = basicfont.Face7x13
)

const (
	charWidth  = 7  // basicfont.Face7x13 advance
	lineHeight = 13 // and height
	maxLegend  = 24 // legend rows before "+N more"
)

// Series is one line of a Lines chart. X and Y have the same length; Target, when set, is
// drawn as a dashed horizontal line in the series' colour.
type Series struct {
	Name   string
	X, Y   []float64
	Target *float64
}

// Lines is a line chart. YMin and YMax fix the y range (otherwise it fits the data and the
// targets).
type Lines struct {
	Title, XLabel, YLabel string
	Series                []Series
	YMin, YMax            *float64
}

// BarSeries is one series of a Bars chart: one value per category.
type BarSeries struct {
	Name   string
	Values []float64
}

// Bars is a grouped bar chart: for each category, one bar per series side by side.
type Bars struct {
	Title, YLabel string
	Categories    []string
	Series        []BarSeries
}

// WritePNG draws the chart at width x height pixels and encodes it as PNG.
func (c Lines) WritePNG(w io.Writer, width, height int) error {
	if err := checkSize(width, height); err != nil {
		return err
	}
	if len(c.Series) == 0 {
		return errors.New("plot: line chart has no series")
	}
	xr, yr := emptyRange(), emptyRange()
	names := make([]string, len(c.Series))
	for i, s := range c.Series {
		names[i] = s.Name
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("plot: series %d (%q) has %d x values and %d y values", i, s.Name, len(s.X), len(s.Y))
		}
		for j := range s.X {
			if math.IsNaN(s.X[j]) || math.IsInf(s.X[j], 0) || math.IsInf(s.Y[j], 0) {
				return fmt.Errorf("plot: series %d (%q) point %d is (%v, %v): x must be finite, y finite or NaN", i, s.Name, j, s.X[j], s.Y[j])
			}
			xr.add(s.X[j])
			yr.add(s.Y[j])
		}
		if s.Target != nil {
			if math.IsNaN(*s.Target) || math.IsInf(*s.Target, 0) {
				return fmt.Errorf("plot: series %d (%q) target %v is not finite", i, s.Name, *s.Target)
			}
			yr.add(*s.Target)
		}
	}
	if c.YMin != nil {
		yr.lo = *c.YMin
	}
	if c.YMax != nil {
		yr.hi = *c.YMax
	}
	if c.YMin != nil && c.YMax != nil && *c.YMin >= *c.YMax {
		return fmt.Errorf("plot: YMin %v must be below YMax %v", *c.YMin, *c.YMax)
	}
	cv := newCanvas(width, height)
	area := cv.frame(c.Title, c.XLabel, c.YLabel, names, xr.finish(), yr.finish(), true)
	for i, s := range c.Series {
		col := Color(i)
		if s.Target != nil {
			y := area.py(*s.Target)
			cv.dashed(area.left, area.right, y, col)
		}
		havePrev := false
		var px, py int
		for j := range s.X {
			if math.IsNaN(s.Y[j]) {
				havePrev = false
				continue
			}
			x, y := area.px(s.X[j]), area.py(s.Y[j])
			if havePrev {
				cv.line(px, py, x, y, col)
			} else {
				cv.dot(x, y, col)
			}
			px, py, havePrev = x, y, true
		}
	}
	return png.Encode(w, cv.img)
}

// WritePNG draws the chart at width x height pixels and encodes it as PNG.
func (c Bars) WritePNG(w io.Writer, width, height int) error {
	if err := checkSize(width, height); err != nil {
		return err
	}
	if len(c.Series) == 0 || len(c.Categories) == 0 {
		return errors.New("plot: bar chart needs at least one series and one category")
	}
	yr := emptyRange()
	yr.add(0)
	names := make([]string, len(c.Series))
	for i, s := range c.Series {
		names[i] = s.Name
		if len(s.Values) != len(c.Categories) {
			return fmt.Errorf("plot: bar series %d (%q) has %d values for %d categories", i, s.Name, len(s.Values), len(c.Categories))
		}
		for j, v := range s.Values {
			if math.IsInf(v, 0) {
				return fmt.Errorf("plot: bar series %d (%q) value %d is infinite", i, s.Name, j)
			}
			yr.add(v)
		}
	}
	cv := newCanvas(width, height)
	xr := axisRange{lo: 0, hi: float64(len(c.Categories))}
	area := cv.frame(c.Title, "", c.YLabel, names, xr, yr.finish(), false)
	groupWidth := float64(area.right-area.left) / float64(len(c.Categories))
	barWidth := groupWidth * 0.8 / float64(len(c.Series))
	zero := area.py(0)
	for j, cat := range c.Categories {
		groupLeft := float64(area.left) + groupWidth*float64(j) + groupWidth*0.1
		for i, s := range c.Series {
			if math.IsNaN(s.Values[j]) {
				continue
			}
			x0 := int(math.Round(groupLeft + barWidth*float64(i)))
			x1 := max(int(math.Round(groupLeft+barWidth*float64(i+1)))-1, x0)
			y := area.py(s.Values[j])
			cv.fill(x0, min(y, zero), x1, max(y, zero), Color(i))
		}
		label := fitText(cat, int(groupWidth)/charWidth)
		center := int(math.Round(float64(area.left) + groupWidth*(float64(j)+0.5)))
		cv.text(center-textWidth(label)/2, area.bottom+4+lineHeight, label, black)
	}
	return png.Encode(w, cv.img)
}

func checkSize(width, height int) error {
	if width < MinWidth || height < MinHeight || width > MaxWidth || height > MaxHeight {
		return fmt.Errorf("plot: size %dx%d outside %dx%d..%dx%d", width, height, MinWidth, MinHeight, MaxWidth, MaxHeight)
	}
	return nil
}

// axisRange is a data range; emptyRange().finish() is [0, 1].
type axisRange struct{ lo, hi float64 }

func emptyRange() axisRange { return axisRange{lo: math.Inf(1), hi: math.Inf(-1)} }

func (r *axisRange) add(v float64) {
	if math.IsNaN(v) {
		return
	}
	r.lo, r.hi = math.Min(r.lo, v), math.Max(r.hi, v)
}

// finish makes the range usable: [0, 1] without data, widened around a single value.
func (r axisRange) finish() axisRange {
	switch {
	case r.lo > r.hi:
		return axisRange{0, 1}
	case r.lo == r.hi:
		pad := math.Max(math.Abs(r.lo)*0.1, 1)
		if r.lo >= 0 && r.lo-pad < 0 {
			return axisRange{0, r.hi + pad}
		}
		return axisRange{r.lo - pad, r.hi + pad}
	}
	return r
}

// niceTicks returns round tick values covering r, about n of them, and the tick step.
func niceTicks(r axisRange, n int) ([]float64, float64) {
	raw := (r.hi - r.lo) / float64(n)
	mag := math.Pow(10, math.Floor(math.Log10(raw)))
	step := mag
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*mag >= raw {
			step = m * mag
			break
		}
	}
	var ticks []float64
	for v := math.Ceil(r.lo/step-1e-9) * step; v <= r.hi+step*1e-9; v += step {
		ticks = append(ticks, v)
	}
	return ticks, step
}

func formatTick(v, step float64) string {
	decimals := max(0, int(-math.Floor(math.Log10(step)+1e-9)))
	if step*math.Pow(10, float64(decimals)) != math.Round(step*math.Pow(10, float64(decimals))) {
		decimals++ // steps like 2.5
	}
	if math.Abs(v) < step*1e-9 {
		v = 0
	}
	return strconv.FormatFloat(v, 'f', decimals, 64)
}

func textWidth(s string) int { return len([]rune(s)) * charWidth }

// fitText shortens s to at most n characters, marking the cut with "~".
func fitText(s string, n int) string {
	r := []rune(s)
	if len(r) <= n || n < 2 {
		return s
	}
	return string(r[:n-1]) + "~"
}

type canvas struct {
	img *image.RGBA
}

func newCanvas(width, height int) *canvas {
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)
	return &canvas{img: img}
}

// plotArea maps data coordinates to pixels inside the axes.
type plotArea struct {
	left, right, top, bottom int
	x, y                     axisRange
}

func (a plotArea) px(v float64) int {
	return a.left + int(math.Round((v-a.x.lo)/(a.x.hi-a.x.lo)*float64(a.right-a.left)))
}

func (a plotArea) py(v float64) int {
	v = math.Min(math.Max(v, a.y.lo), a.y.hi) // values outside a fixed range sit on its edge
	return a.bottom - int(math.Round((v-a.y.lo)/(a.y.hi-a.y.lo)*float64(a.bottom-a.top)))
}

// frame draws the title, axes, grid, tick labels, axis labels and legend, and returns the area
// left for the data. xTicks says whether the x axis gets numeric ticks (not for bar charts).
func (cv *canvas) frame(title, xLabel, yLabel string, names []string, xr, yr axisRange, xTicks bool) plotArea {
	width, height := cv.img.Bounds().Dx(), cv.img.Bounds().Dy()
	// Extend the y range to whole tick steps so the top and bottom lines are labelled.
	_, yStep := niceTicks(yr, 5)
	yr = axisRange{lo: math.Floor(yr.lo/yStep+1e-9) * yStep, hi: math.Ceil(yr.hi/yStep-1e-9) * yStep}
	yTickValues, yStep := niceTicks(yr, 5)
	labelWidth := 0
	for _, v := range yTickValues {
		labelWidth = max(labelWidth, textWidth(formatTick(v, yStep)))
	}
	legendWidth := 0
	for _, n := range names {
		legendWidth = max(legendWidth, textWidth(n))
	}
	legendWidth = min(legendWidth, width/4) + 24
	a := plotArea{left: labelWidth + 12, right: width - legendWidth - 12, top: 8, bottom: height - 8 - lineHeight - 4}
	if yLabel != "" {
		a.left += lineHeight + 4
	}
	if title != "" {
		a.top += lineHeight + 6
	}
	if xLabel != "" {
		a.bottom -= lineHeight + 4
	}
	a.x, a.y = xr, yr
	if title != "" {
		cv.text((a.left+a.right)/2-textWidth(title)/2, 8+lineHeight-2, title, black)
	}
	for _, v := range yTickValues {
		y := a.py(v)
		cv.hline(a.left, a.right, y, gridColor)
		label := formatTick(v, yStep)
		cv.text(a.left-6-textWidth(label), y+4, label, black)
	}
	if xTicks {
		xTickValues, xStep := niceTicks(xr, 8)
		for _, v := range xTickValues {
			x := a.px(v)
			cv.vline(x, a.top, a.bottom, gridColor)
			label := formatTick(v, xStep)
			cv.text(x-textWidth(label)/2, a.bottom+4+lineHeight-2, label, black)
		}
	}
	cv.hline(a.left, a.right, a.bottom, black)
	cv.vline(a.left, a.top, a.bottom, black)
	if xLabel != "" {
		cv.text((a.left+a.right)/2-textWidth(xLabel)/2, height-6, xLabel, black)
	}
	if yLabel != "" {
		cv.verticalText(4, (a.top+a.bottom)/2+textWidth(yLabel)/2, yLabel)
	}
	maxChars := (legendWidth - 24) / charWidth
	for i, n := range names {
		y := a.top + 4 + i*(lineHeight+3)
		if i == maxLegend && len(names) > maxLegend+1 {
			cv.text(a.right+12, y+lineHeight-3, fmt.Sprintf("+%d more", len(names)-maxLegend), black)
			break
		}
		cv.fill(a.right+12, y+2, a.right+20, y+10, Color(i))
		cv.text(a.right+24, y+lineHeight-3, fitText(n, maxChars), black)
	}
	return a
}

func (cv *canvas) set(x, y int, c color.RGBA) {
	if image.Pt(x, y).In(cv.img.Rect) {
		cv.img.SetRGBA(x, y, c)
	}
}

func (cv *canvas) hline(x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		cv.set(x, y, c)
	}
}

func (cv *canvas) vline(x, y0, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		cv.set(x, y, c)
	}
}

func (cv *canvas) fill(x0, y0, x1, y1 int, c color.RGBA) {
	for y := y0; y <= y1; y++ {
		cv.hline(x0, x1, y, c)
	}
}

// dashed draws a two-pixel-thick dashed horizontal line: 6 pixels on, 4 off.
func (cv *canvas) dashed(x0, x1, y int, c color.RGBA) {
	for x := x0; x <= x1; x++ {
		if (x-x0)%10 < 6 {
			cv.set(x, y, c)
			cv.set(x, y+1, c)
		}
	}
}

func (cv *canvas) dot(x, y int, c color.RGBA) { cv.fill(x-1, y-1, x+1, y+1, c) }

// line draws a two-pixel-thick segment (Bresenham, with the pixel below or right of each).
func (cv *canvas) line(x0, y0, x1, y1 int, c color.RGBA) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := sign(x1-x0), sign(y1-y0)
	steep := -dy > dx
	e := dx + dy
	for {
		cv.set(x0, y0, c)
		if steep {
			cv.set(x0+1, y0, c)
		} else {
			cv.set(x0, y0+1, c)
		}
		if x0 == x1 && y0 == y1 {
			return
		}
		if e2 := 2 * e; e2 >= dy {
			e += dy
			x0 += sx
		} else if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(v int) int {
	if v < 0 {
		return -v
	}
	return v
}

func sign(v int) int {
	switch {
	case v < 0:
		return -1
	case v > 0:
		return 1
	}
	return 0
}

// text draws s with its baseline at y.
func (cv *canvas) text(x, y int, s string, c color.RGBA) {
	d := font.Drawer{Dst: cv.img, Src: image.NewUniform(c), Face: face, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// verticalText draws s rotated a quarter turn counter-clockwise, reading bottom to top, its
// first character's left edge at x and bottom at y.
func (cv *canvas) verticalText(x, y int, s string) {
	w := textWidth(s)
	tmp := image.NewRGBA(image.Rect(0, 0, w, lineHeight))
	draw.Draw(tmp, tmp.Bounds(), image.NewUniform(white), image.Point{}, draw.Src)
	d := font.Drawer{Dst: tmp, Src: image.NewUniform(black), Face: face, Dot: fixed.P(0, lineHeight-3)}
	d.DrawString(s)
	for ty := range lineHeight {
		for tx := range w {
			if px := tmp.RGBAAt(tx, ty); px != white {
				cv.set(x+ty, y-tx, px)
			}
		}
	}
}
