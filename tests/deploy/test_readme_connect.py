"""The README's connect snippet runs against the deployed namespace hosts,
with this deployment's coordinator, secret file, fabric and device in place
of the CloudLab example's."""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from readme_snippets import snippets  # noqa: E402


def test_readme_connect_snippet_runs(hosts, tmp_path):
    (prog,) = [s for s in snippets() if "Cluster.connect(" in s]
    secret_file = tmp_path / "secret"
    secret_file.write_text(hosts.secret + "\n")
    subs = [(r'open\("[^"]+"\)', f'open("{secret_file}")'),
            (r'"\d+\.\d+\.\d+\.\d+:\d+"', f'"{hosts.coordinator}"'),
            (r'fabric="\w+"', 'fabric="tcp"'),
            (r'net_device="[^"]+"', f'net_device="{hosts.bridge}"')]
    for pattern, repl in subs:
        prog, n = re.subn(pattern, repl, prog)
        assert n == 1, f"the README's connect snippet changed shape: no {pattern} in\n{prog}"
    # the snippet leaves c open: show it joined, then close it
    prog += "assert c.nodes; print(len(c.nodes)); c.close()\n"
    # run outside the checkout so the installed package, not the source tree, is imported
    p = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True,
                       cwd=tmp_path, timeout=120)   # a join over the bridge takes about a second; loaded hosts, more
    assert p.returncode == 0, f"{prog}\n--- stderr:\n{p.stderr[-3000:]}"
    # at least the coordinator's daemon: a fault test before may have left
    # another one still rejoining
    assert int(p.stdout.split()[-1]) >= 1
