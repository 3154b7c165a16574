"""The host limit's inputs: Ray's kill threshold from the environment, a container's cgroup limit (v2, v1)."""

from __future__ import annotations

from verltop.sources.hostmem import cgroup_memory, memory_threshold


def test_threshold_from_the_environment_or_rays_default():
    assert memory_threshold({}) == 0.95
    assert memory_threshold({"RAY_memory_usage_threshold": "0.8"}) == 0.8
    assert memory_threshold({"RAY_memory_usage_threshold": "2"}) == 0.95  # not a fraction: Ray's default
    assert memory_threshold({"RAY_memory_usage_threshold": "x"}) == 0.95


def test_cgroup_v2_and_v1_limits_less_inactive_file_cache(tmp_path):
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "memory.max").write_text("8589934592\n")
    (v2 / "memory.current").write_text("4294967296\n")
    (v2 / "memory.stat").write_text("anon 1\ninactive_file 1073741824\nactive_file 5\n")
    assert cgroup_memory(str(v2)) == (8 << 30, 3 << 30)
    (v2 / "memory.max").write_text("max\n")
    assert cgroup_memory(str(v2)) == (None, None)  # no limit
    v1 = tmp_path / "v1" / "memory"
    v1.mkdir(parents=True)
    (v1 / "memory.limit_in_bytes").write_text(str(9223372036854771712))
    (v1 / "memory.usage_in_bytes").write_text("100")
    assert cgroup_memory(str(tmp_path / "v1")) == (None, None)  # v1's "no limit" is a huge number
    (v1 / "memory.limit_in_bytes").write_text(str(16 << 30))
    (v1 / "memory.stat").write_text("total_inactive_file 40\n")
    assert cgroup_memory(str(tmp_path / "v1")) == (16 << 30, 60)
    assert cgroup_memory(str(tmp_path / "none")) == (None, None)

