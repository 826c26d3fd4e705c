"""Runs episodes with llm-in-sandbox 0.2.0's own runner and agent loop, one after another in one
process (as the package's own batch runner does; importing litellm costs seconds of CPU); run by
test_paper_episodes.py in the package's venv (with litellm, as the package needs).

    python paper_package_episode.py

Each job comes in on the test's pipe as {"op": "job", "job": JOB.json, "out": OUT.json, "env": {...}}
(the env is set before the episode: its HOME and the scorers' data folders) and ends with
{"op": "done"} going back (with "error", a traceback, when the episode raised).

JOB: {"suite", "mode" ("llm-in-sandbox" or "llm"), "problem" (a row), "agent_config" (as its
CLI builds it)}. The package is imported and run unchanged: `runner.run_single_problem`, which
makes the agent, its DockerRuntime and its prompts, runs the loop and scores the answer with the
suite's reward.py. Only the `docker` client library is replaced, at run time, by one whose
container runs each `exec_run` (the same argv, working directory and environment) in a lis-tui
sandbox held by the test process: requests go out on one inherited pipe and answers come back on
another (their fds in LIS_TO_TEST_FD and LIS_FROM_TEST_FD), one JSON line each.
"""
import base64
import io
import json
import os
import sys
import traceback
import types

_to_test = os.fdopen(int(os.environ["LIS_TO_TEST_FD"]), "w", buffering=1)
_from_test = os.fdopen(int(os.environ["LIS_FROM_TEST_FD"]), "r")


def _ask(request: dict) -> dict:
    _to_test.write(json.dumps(request) + "\n")
    answer = json.loads(_from_test.readline())
    if "error" in answer:
        raise RuntimeError(answer["error"])
    return answer


class _Exec:
    def __init__(self, exit_code, output):
        self.exit_code, self.output = exit_code, output


class _Container:
    """What DockerRuntime uses of a container: exec_run, put_archive, stop, remove."""

    def __init__(self, environment: dict, working_dir: str):
        self.id, self.status = "lis-tui-sandbox", "running"
        self.environment, self.working_dir = dict(environment or {}), working_dir

    def exec_run(self, cmd, workdir=None, environment=None, demux=False, **_):
        # an exec sees the container's environment with its own on top, as docker does
        env = {**self.environment, **(environment or {})}
        got = _ask({"op": "exec", "argv": list(cmd), "cwd": workdir or self.working_dir,
                    "env": env, "demux": bool(demux)})
        out, err = (base64.b64decode(got[k]) for k in ("stdout", "stderr"))
        return _Exec(got["exit_code"], (out or None, err or None) if demux else out)

    def put_archive(self, path, data):
        blob = data.getvalue() if isinstance(data, io.BytesIO) else bytes(data)
        _ask({"op": "put", "path": path, "tar": base64.b64encode(blob).decode()})
        return True

    def stop(self, timeout=None):
        pass

    def remove(self, force=False):
        self.status = "removed"


def _fake_docker() -> types.ModuleType:
    docker = types.ModuleType("docker")
    errors = types.ModuleType("docker.errors")
    errors.NotFound = type("NotFound", (Exception,), {})
    errors.ImageNotFound = type("ImageNotFound", (errors.NotFound,), {})
    docker.errors = errors

    class Containers:
        def get(self, name):
            raise errors.NotFound(name)

        def run(self, image, command=None, environment=None, working_dir=None, **_):
            return _Container(environment, working_dir)

    class Images:
        def get(self, name):
            return name

    class Client:
        containers, images = Containers(), Images()

    docker.from_env = lambda **_: Client()
    sys.modules["docker"], sys.modules["docker.errors"] = docker, errors
    return docker


def episode(job_path: str, out_path: str) -> None:
    job = json.loads(open(job_path).read())
    from llm_in_sandbox.benchmark import runner  # noqa: PLC0415 (after the fake docker)

    logs = os.path.join(os.path.dirname(out_path), "package-logs")
    os.makedirs(logs, exist_ok=True)
    config = runner.load_task_config(job["suite"])
    prompt_config = {"system_prompt": config["system_prompt"],
                     "instance_prompt": config.get("instance_prompt", "")}
    stdout, sys.stdout = sys.stdout, sys.stderr  # its LLM mode prints; fd 1 stays quiet
    try:
        result = runner.run_single_problem({
            "problem": job["problem"], "agent_config": job["agent_config"],
            "task_name": job["suite"], "prompt_config": prompt_config,
            "output_dir": os.path.dirname(out_path), "logs_dir": logs, "mode": job["mode"]})
    finally:
        sys.stdout = stdout
    _ask({"op": "close"})
    with open(out_path, "w") as out:
        json.dump({"score": float(result.score), "answer": result.agent_answer,
                   "error": result.error, "steps": len(result.trajectory)}, out)


def main() -> None:
    _fake_docker()
    for line in _from_test:
        job = json.loads(line)
        os.environ.update(job["env"])
        done = {"op": "done"}
        try:
            episode(job["job"], job["out"])
        except BaseException:  # noqa: BLE001 (the test fails with it, and the next job may run)
            done["error"] = traceback.format_exc()
        _to_test.write(json.dumps(done) + "\n")


if __name__ == "__main__":
    main()
