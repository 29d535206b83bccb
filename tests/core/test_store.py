"""ResultStore: durable, validated, crash-safe results with retention and paging."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nsight_core.errors import ErrorClass, NsightCoreError
from nsight_core.plan.config import STORE_ENV, EngineConfig
from nsight_core.request import ProfileRequest
from nsight_core.results import Comparison, Correctness, ProfileResult, Row
from nsight_core.store.files import result_validator
from nsight_core.store.result_store import (
    INDEX_FILE,
    MANIFEST_FILE,
    RESULT_FILE,
    CorruptResultError,
    ResultFilter,
    ResultStore,
    default_store_root,
    validate_result_id,
    warm_result_validator,
    write_atomic,
)
from nsight_core.store.retention import Retention


def _request(candidates: tuple[str, ...] = ("cand.py:fast",), configs: int = 2) -> ProfileRequest:
    return ProfileRequest(
        reference="ref.py:slow",
        candidates=list(candidates),
        inputs="ref.py:make_inputs",
        configs=[{"n": 8 * (i + 1)} for i in range(configs)],
        backend="events",
        runs=3,
    )


def _row(annotation: str, config_id: int, metric: str = "events__time_duration") -> Row:
    raw = [10.0, 11.0, 12.0]
    return Row(
        Annotation=annotation,
        ConfigId=config_id,
        Params={"n": 8 * (config_id + 1)},
        Metric=metric,
        Unit="ns",
        AvgValue=11.0,
        MedianValue=11.0,
        StdDev=1.0,
        MinValue=10.0,
        MaxValue=12.0,
        NumRuns=3,
        RequestedRuns=3,
        RelativeStdDevPct=9.1,
        CI95_Lower=8.5,
        CI95_Upper=13.5,
        StableMeasurement=False,
        Kernel=None,
        Backend="events",
        Trust="noisy",
        RawValues=list(raw),
    )


def _finish(store: ResultStore, request: ProfileRequest) -> ProfileResult:
    placeholder = store.create(request)
    rows = [_row(a, c) for a in request.annotations for c in range(len(request.configs))]
    comparisons = [
        Comparison(
            Annotation=cand,
            Baseline=request.reference,
            ConfigId=c,
            Params={},
            Metric="events__time_duration",
            Ratio=0.5,
            Speedup=2.0,
            Speedup_CI95_Lower=1.8,
            Speedup_CI95_Upper=2.2,
            Resolvable=True,
            NumPairs=3,
        )
        for cand in request.candidates
        for c in range(len(request.configs))
    ]
    correctness = [
        Correctness(Annotation=cand, ConfigId=c, Params={}, Passed=True, Seeds=3)
        for cand in request.candidates
        for c in range(len(request.configs))
    ]
    return store.finish(
        placeholder.model_copy(
            update={
                "status": "done",
                "rows": rows,
                "comparisons": comparisons,
                "correctness": correctness,
                "message": "done",
            }
        )
    )


def test_a_finished_result_reads_back_from_a_new_store_on_the_same_root(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    done = _finish(store, _request())

    reopened = ResultStore(tmp_path)
    loaded = reopened.load(done.result_id)

    assert loaded == done
    assert loaded.rows[0].RawValues == [10.0, 11.0, 12.0]
    assert reopened.load_request(done.result_id) == _request()
    rdir = tmp_path / done.result_id
    assert (rdir / MANIFEST_FILE).is_file() and (rdir / RESULT_FILE).is_file()
    assert loaded.artifacts["result_dir"] == str(rdir)
    summary = reopened.summary(done.result_id)
    assert summary.status == "done"
    assert summary.headlines == ["cand.py:fast: correct; speedup 2x (2/2 resolvable)"]


def test_the_warmed_validator_is_the_one_results_are_read_with(tmp_path: Path) -> None:
    """A server warms the validator at start; reading a result afterwards builds none."""
    warm_result_validator()
    built = result_validator.cache_info().misses
    store = ResultStore(tmp_path)
    placeholder = store.create(_request())
    assert store.load(placeholder.result_id).result_id == placeholder.result_id
    info = result_validator.cache_info()
    assert info.currsize == 1 and info.misses == built and info.hits >= 1


def test_a_new_job_is_queued_then_running_and_its_dir_is_the_job_dir(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    queued = store.create(_request())
    assert queued.status == "queued"
    assert store.result_dir(queued.result_id) == tmp_path / queued.result_id
    assert store.mark_running(queued.result_id).status == "running"
    assert store.load(queued.result_id).status == "running"
    assert store.summary(queued.result_id).status == "running"
    store.close()


@pytest.mark.parametrize(
    "bad",
    [
        "../x",
        "/",
        "/etc/passwd",
        "..",
        "",
        "r20261201T120000123-0a1b2c3d/../../x",
        "r20261201T120000123-0A1B2C3D",
        "r20261201T120000123-0a1b2c3",
        "r20261201T120000123-0a1b2c3d\n",
        "x20261201T120000123-0a1b2c3d",
    ],
)
def test_ids_that_are_not_store_ids_are_rejected_as_invalid_request(
    tmp_path: Path, bad: str
) -> None:
    store = ResultStore(tmp_path)
    with pytest.raises(NsightCoreError) as info:
        store.load(bad)
    assert info.value.error_class is ErrorClass.INVALID_REQUEST


def test_a_well_formed_id_of_no_stored_result_is_invalid_request(tmp_path: Path) -> None:
    with pytest.raises(NsightCoreError) as info:
        ResultStore(tmp_path).load("r20261201T120000123-0a1b2c3d")
    assert info.value.error_class is ErrorClass.INVALID_REQUEST
    assert validate_result_id("r20261201T120000123-0a1b2c3d")


def test_a_result_file_that_is_not_json_is_reported_as_corrupt_with_its_path(
    tmp_path: Path,
) -> None:
    store = ResultStore(tmp_path)
    done = _finish(store, _request())
    path = tmp_path / done.result_id / RESULT_FILE
    path.write_text('{"result_id": ')
    with pytest.raises(CorruptResultError) as info:
        store.load(done.result_id)
    assert info.value.path == path
    assert "not readable JSON" in info.value.detail


def test_a_result_file_that_breaks_the_schema_is_reported_as_corrupt(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    done = _finish(store, _request())
    path = tmp_path / done.result_id / RESULT_FILE
    data = json.loads(path.read_text())
    data["rows"][0]["NumRuns"] = "three"
    path.write_text(json.dumps(data))
    with pytest.raises(CorruptResultError) as info:
        store.load(done.result_id)
    assert "$.rows[0].NumRuns" in info.value.detail


def test_a_job_cut_off_by_a_crash_is_marked_failed_at_the_next_open(tmp_path: Path) -> None:
    script = textwrap.dedent(
        f"""
        import os
        from nsight_core.request import ProfileRequest
        from nsight_core.store.result_store import ResultStore
        store = ResultStore({str(tmp_path)!r})
        req = ProfileRequest(reference="ref.py:slow", candidates=["cand.py:fast"],
                             inputs="ref.py:make_inputs", backend="events")
        running = store.mark_running(store.create(req).result_id)
        queued = store.create(req)
        print(running.result_id, queued.result_id, flush=True)
        os._exit(9)  # no cleanup: what a crash or kill -9 leaves behind
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode == 9, proc.stderr
    ids = proc.stdout.split()

    store = ResultStore(tmp_path)

    assert sorted(store.recovered) == sorted(ids)
    for result_id in ids:
        result = store.load(result_id)
        assert result.status == "failed"
        assert result.error is not None
        assert result.error.ErrorClass is ErrorClass.CRASHED
        assert "stopped while it was" in result.error.Error


def test_a_job_still_owned_by_a_live_store_is_left_alone(tmp_path: Path) -> None:
    owner = ResultStore(tmp_path)
    running = owner.mark_running(owner.create(_request()).result_id)

    other = ResultStore(tmp_path)

    assert other.recovered == []
    assert other.load(running.result_id).status == "running"
    owner.close()
    assert ResultStore(tmp_path).recovered == [running.result_id]


def test_retention_deletes_the_oldest_finished_results_beyond_max_results(
    tmp_path: Path,
) -> None:
    store = ResultStore(tmp_path, retention=Retention(max_results=2))
    ids = [_finish(store, _request()).result_id for _ in range(4)]
    in_flight = store.create(_request())

    listed = [s.result_id for s in store.query(limit=10).summaries]

    store.close()
    assert listed == [in_flight.result_id, ids[3], ids[2]]
    assert not (tmp_path / ids[0]).exists()
    assert not (tmp_path / ids[1]).exists()


def test_retention_by_age_prunes_old_results_at_open(tmp_path: Path) -> None:
    done = _finish(ResultStore(tmp_path, retention=Retention(max_results=None)), _request())
    assert (tmp_path / done.result_id).exists()

    store = ResultStore(tmp_path, retention=Retention(max_results=None, max_age_days=1e-9))

    assert store.query().summaries == []
    assert not (tmp_path / done.result_id).exists()


def test_retention_rejects_limits_that_would_delete_everything() -> None:
    with pytest.raises(ValueError):
        Retention(max_results=0)
    with pytest.raises(ValueError):
        Retention(max_age_days=0)


def test_retention_reads_its_limits_from_the_configured_environment() -> None:
    env = {"NSPY_MCP_STORE_MAX_RESULTS": "7", "NSPY_MCP_STORE_MAX_AGE_DAYS": "1.5"}
    assert Retention.of_config(EngineConfig.from_env(env)) == Retention(7, 1.5)
    env["NSPY_MCP_STORE_MAX_RESULTS"] = "none"
    assert Retention.of_config(EngineConfig.from_env(env)).max_results is None
    with pytest.raises(ValueError, match="NSPY_MCP_STORE_MAX_AGE_DAYS='soon' is not a number"):
        Retention.of_config(EngineConfig.from_env({"NSPY_MCP_STORE_MAX_AGE_DAYS": "soon"}))


def test_a_listing_pages_newest_first_and_names_the_next_cursor(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    ids = [_finish(store, _request()).result_id for _ in range(5)]

    first = store.query(limit=2)
    second = store.query(limit=2, cursor=first.next_cursor)
    third = store.query(limit=2, cursor=second.next_cursor)

    seen = [s.result_id for page in (first, second, third) for s in page.summaries]
    assert seen == ids[::-1]
    assert first.total == 5
    assert third.next_cursor is None


def test_a_listing_filters_by_annotation_config_metric_status_and_time(tmp_path: Path) -> None:
    store = ResultStore(tmp_path)
    a = _finish(store, _request(("a.py:k",), configs=1))
    b = _finish(store, _request(("b.py:k",), configs=3))
    queued = store.create(_request(("c.py:k",)))

    def ids(**kw: object) -> list[str]:
        return [s.result_id for s in store.query(ResultFilter(**kw), limit=50).summaries]  # type: ignore[arg-type]

    assert ids(annotation="a.py:k") == [a.result_id]
    assert ids(annotation="ref.py:slow") == [queued.result_id, b.result_id, a.result_id]
    assert ids(config_id=2) == [b.result_id]
    assert ids(metric="events__time_duration", status="done") == [b.result_id, a.result_id]
    assert ids(metric="gpu__time_duration.sum") == []
    assert ids(status="queued") == [queued.result_id]
    now = datetime.now(UTC)
    assert ids(since=now + timedelta(hours=1)) == []
    assert len(ids(until=now + timedelta(hours=1), since=now - timedelta(hours=1))) == 3
    store.close()


def test_a_lost_index_is_rebuilt_from_the_result_directories(tmp_path: Path) -> None:
    done = _finish(ResultStore(tmp_path), _request())
    for suffix in ("", "-wal", "-shm"):
        (tmp_path / f"{INDEX_FILE}{suffix}").unlink(missing_ok=True)

    store = ResultStore(tmp_path)

    assert [s.result_id for s in store.query().summaries] == [done.result_id]


def test_an_unreadable_index_is_moved_aside_and_rebuilt(tmp_path: Path) -> None:
    done = _finish(ResultStore(tmp_path), _request())
    for suffix in ("-wal", "-shm"):
        (tmp_path / f"{INDEX_FILE}{suffix}").unlink(missing_ok=True)
    (tmp_path / INDEX_FILE).write_bytes(b"this is not an sqlite database" * 100)

    store = ResultStore(tmp_path)

    assert [s.result_id for s in store.query().summaries] == [done.result_id]
    assert list(tmp_path.glob(f"{INDEX_FILE}.broken-*"))


def test_atomic_writes_replace_whole_files_and_leave_no_temporaries(tmp_path: Path) -> None:
    target = tmp_path / "f.json"
    write_atomic(target, "old")
    write_atomic(target, "new")
    assert target.read_text() == "new"
    assert [p.name for p in tmp_path.iterdir()] == ["f.json"]


def test_the_store_root_defaults_to_the_configured_override(tmp_path: Path) -> None:
    config = EngineConfig.from_env({STORE_ENV: str(tmp_path / "elsewhere")})
    assert default_store_root(config) == tmp_path / "elsewhere"
    assert default_store_root(EngineConfig.from_env({})).parts[-2:] == ("nspy-mcp", "results")
    assert default_store_root().parts[-2:] == ("nspy-mcp", "results")
