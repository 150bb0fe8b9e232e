"""Canned ``/metrics`` pages: Prometheus text, and protobuf with native histograms.

Prometheus 2.42 ingests native histograms only from the protobuf exposition format
(``--enable-feature=native-histograms``). No Python package ships the compiled
``io.prometheus.client`` messages, so the message types are built here from their field
numbers in ``prometheus/client_model``'s ``io/prometheus/client/metrics.proto`` with the
``protobuf`` package's descriptor API, and the page is the "delimited" encoding: each
``MetricFamily`` preceded by its length as a varint.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

#: The Content-Type Prometheus negotiates for protobuf.
PROTOBUF_TYPE = "application/vnd.google.protobuf; proto=io.prometheus.client.MetricFamily; encoding=delimited"

_F = descriptor_pb2.FieldDescriptorProto
_OPT, _REP = _F.LABEL_OPTIONAL, _F.LABEL_REPEATED


def _messages() -> dict[str, Any]:
    """Build the subset of metrics.proto llmscale's tests need; return the message classes by name."""
    fdp = descriptor_pb2.FileDescriptorProto(
        name="llmscale_tests/io/prometheus/client/metrics.proto",
        package="io.prometheus.client",
        syntax="proto2",
    )
    enum = fdp.enum_type.add(name="MetricType")
    for number, name in enumerate(("COUNTER", "GAUGE", "SUMMARY", "UNTYPED", "HISTOGRAM")):
        enum.value.add(name=name, number=number)

    def message(name: str, *fields: tuple[str, int, int, int, str]) -> None:
        msg = fdp.message_type.add(name=name)
        for fname, number, label, ftype, type_name in fields:
            f = msg.field.add(name=fname, number=number, label=label, type=ftype)
            if type_name:
                f.type_name = type_name

    message("LabelPair", ("name", 1, _OPT, _F.TYPE_STRING, ""), ("value", 2, _OPT, _F.TYPE_STRING, ""))
    message("Gauge", ("value", 1, _OPT, _F.TYPE_DOUBLE, ""))
    message("Counter", ("value", 1, _OPT, _F.TYPE_DOUBLE, ""))
    message(
        "Bucket",
        ("cumulative_count", 1, _OPT, _F.TYPE_UINT64, ""),
        ("upper_bound", 2, _OPT, _F.TYPE_DOUBLE, ""),
    )
    message("BucketSpan", ("offset", 1, _OPT, _F.TYPE_SINT32, ""), ("length", 2, _OPT, _F.TYPE_UINT32, ""))
    message(
        "Histogram",
        ("sample_count", 1, _OPT, _F.TYPE_UINT64, ""),
        ("sample_sum", 2, _OPT, _F.TYPE_DOUBLE, ""),
        ("bucket", 3, _REP, _F.TYPE_MESSAGE, ".io.prometheus.client.Bucket"),
        ("schema", 5, _OPT, _F.TYPE_SINT32, ""),
        ("zero_threshold", 6, _OPT, _F.TYPE_DOUBLE, ""),
        ("zero_count", 7, _OPT, _F.TYPE_UINT64, ""),
        ("positive_span", 12, _REP, _F.TYPE_MESSAGE, ".io.prometheus.client.BucketSpan"),
        ("positive_delta", 13, _REP, _F.TYPE_SINT64, ""),
    )
    message(
        "Metric",
        ("label", 1, _REP, _F.TYPE_MESSAGE, ".io.prometheus.client.LabelPair"),
        ("gauge", 2, _OPT, _F.TYPE_MESSAGE, ".io.prometheus.client.Gauge"),
        ("counter", 3, _OPT, _F.TYPE_MESSAGE, ".io.prometheus.client.Counter"),
        ("histogram", 7, _OPT, _F.TYPE_MESSAGE, ".io.prometheus.client.Histogram"),
    )
    message(
        "MetricFamily",
        ("name", 1, _OPT, _F.TYPE_STRING, ""),
        ("help", 2, _OPT, _F.TYPE_STRING, ""),
        ("type", 3, _OPT, _F.TYPE_ENUM, ".io.prometheus.client.MetricType"),
        ("metric", 4, _REP, _F.TYPE_MESSAGE, ".io.prometheus.client.Metric"),
    )
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"io.prometheus.client.{name}"))
        for name in ("MetricFamily",)
    }


_MESSAGES = _messages()


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


@dataclass
class Family:
    """One metric family: ``kind`` ``gauge``, ``counter`` or ``histogram``; one value per label set.

    For ``histogram`` each value is a :class:`NativeHistogram`.
    """

    name: str
    kind: str
    values: list[tuple[Mapping[str, str], Any]] = field(default_factory=list)


@dataclass
class NativeHistogram:
    """A native (sparse) histogram: schema, and observation counts per bucket index.

    At schema ``s`` bucket ``i`` holds observations in ``(2^((i-1)/2^s), 2^(i/2^s)]``; at schema 0
    bucket 0 is ``(0.5, 1]``, bucket -1 ``(0.25, 0.5]``.
    """

    schema: int
    buckets: dict[int, int]
    total: float  # sum of the observations

    @property
    def count(self) -> int:
        return sum(self.buckets.values())


def protobuf_page(families: Sequence[Family]) -> bytes:
    """The families in the delimited protobuf exposition format."""
    family_cls = _MESSAGES["MetricFamily"]
    kinds = {"counter": 0, "gauge": 1, "histogram": 4}
    out = bytearray()
    for fam in families:
        msg = family_cls(name=fam.name, help=fam.name, type=kinds[fam.kind])
        for labels, value in fam.values:
            metric = msg.metric.add()
            for k, v in sorted(labels.items()):
                metric.label.add(name=k, value=v)
            if fam.kind == "gauge":
                metric.gauge.value = float(value)
            elif fam.kind == "counter":
                metric.counter.value = float(value)
            else:
                h: NativeHistogram = value
                hist = metric.histogram
                hist.sample_count = h.count
                hist.sample_sum = h.total
                hist.schema = h.schema
                hist.zero_threshold = 2.938735877055719e-39  # client_golang's default
                hist.zero_count = 0
                indices = sorted(h.buckets)
                # One span per run of consecutive indices; counts as deltas from the previous bucket.
                prev_index: int | None = None
                prev_count = 0
                for i in indices:
                    if prev_index is None or i != prev_index + 1:
                        gap = i if prev_index is None else i - prev_index - 1
                        hist.positive_span.add(offset=gap, length=0)
                    hist.positive_span[-1].length += 1
                    hist.positive_delta.append(h.buckets[i] - prev_count)
                    prev_count = h.buckets[i]
                    prev_index = i
        data = msg.SerializeToString()
        out += _varint(len(data)) + data
    return bytes(out)


def text_page(families: Sequence[Family]) -> str:
    """Gauges and counters of ``families`` in the Prometheus text format (histograms not supported)."""
    lines = []
    for fam in families:
        assert fam.kind in ("gauge", "counter"), fam.kind
        lines.append(f"# TYPE {fam.name} {'counter' if fam.kind == 'counter' else 'gauge'}")
        for labels, value in fam.values:
            text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            lines.append(f"{fam.name}{{{text}}} {float(value)}")
    return "\n".join(lines) + "\n"
