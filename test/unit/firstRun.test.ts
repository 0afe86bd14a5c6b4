/**
 * The first run's light parts: apt's status as one progress line, setup advice in the editor's words, tabs titled by
 * labels.
 */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { APT_COMMAND, aptStatusText, progressLine } from '../../trainer-daemon/training/doctor';
import { EDITOR_ENV, forReader, inEditorWords } from '../../trainer-daemon/protocol/setupAdvice';
import type { Rollout } from '../../trainer-daemon/protocol/records';
import { tabTitle } from '../../trainer-daemon/protocol/ui/editorTarget';
import type { EditorState } from '../../trainer-daemon/protocol/ui/editorMessages';
import { formatTime } from '../../trainer-daemon/protocol/ui/rolloutText';

describe('the demo installs PyTorch from Debian quietly', () => {
  it('asks for no recommended packages', () => {
    assert.match(APT_COMMAND, /^apt-get install -y --no-install-recommends python3-torch /);
  });

  it("reads apt's status lines (APT::Status-Fd) and ignores the rest", () => {
    assert.equal(aptStatusText('dlstatus:3:42.7:Retrieving file 3 of 40'), 'Downloading 42% Retrieving file 3 of 40');
    assert.equal(
      aptStatusText('pmstatus:libtorch2.5:80:Setting up libtorch2.5 (2.5.1)\n'),
      'Installing 80% Setting up libtorch2.5 (2.5.1)',
    );
    assert.equal(aptStatusText('Get:1 http://deb.debian.org/debian bookworm/main amd64 python3-torch'), undefined);
    assert.equal(aptStatusText('pmerror:foo:10:bad'), undefined);
  });

  it('off a terminal, says a line per tenth of each phase; on one, rewrites a single line', () => {
    const said: string[] = [];
    const line = progressLine((text) => said.push(text), { isTTY: false } as NodeJS.WriteStream);
    for (const percent of [0, 3, 9, 10, 15, 57, 100]) line.update(`Downloading ${percent}% file`);
    line.update('Installing 2% x');
    line.done();
    assert.deepEqual(said, [
      'Downloading 0% file',
      'Downloading 10% file',
      'Downloading 57% file',
      'Downloading 100% file',
      'Installing 2% x',
    ]);

    let written = '';
    const terminal = {
      isTTY: true,
      columns: 40,
      write: (text: string) => (written += text),
    } as unknown as NodeJS.WriteStream;
    const tty = progressLine(() => assert.fail('nothing said on a terminal'), terminal);
    tty.update('Downloading 1% a');
    tty.update(`Installing 99% ${'x'.repeat(100)}`);
    tty.done();
    assert.equal(written.split('\n').length, 2, 'one line, then its end');
    assert.ok(
      written.split('\r\x1b[K').every((part) => part.replace('\n', '').length <= 39),
      'cut to the terminal width',
    );
  });
});

describe("setup advice in the editor's words", () => {
  it('points every `lightning doctor --setup` to Set Up Trainer', () => {
    assert.equal(
      inEditorWords('no Python with PyTorch found. Run `lightning doctor --setup`, or install it: pip install torch.'),
      'no Python with PyTorch found. Run Lightning: Set Up Trainer (Command Palette), or install it: pip install torch.',
    );
    assert.equal(
      inEditorWords('its Python has no PyTorch (run `lightning doctor --setup`)'),
      'its Python has no PyTorch (run Lightning: Set Up Trainer (Command Palette))',
    );
    assert.equal(
      inEditorWords('cannot run the trainer: x. Run `lightning doctor`.'),
      'cannot run the trainer: x. Run Lightning: Set Up Trainer (Command Palette).',
    );
    assert.equal(
      inEditorWords('(or: lightning doctor --setup --hf)'),
      '(or: Lightning: Set Up Trainer (Command Palette))',
    );
    assert.equal(inEditorWords('nothing to say'), 'nothing to say');
  });

  it('only where the editor ran the command', () => {
    const text = 'Run `lightning doctor --setup`.';
    assert.equal(forReader(text, {}), text);
    assert.equal(forReader(text, { [EDITOR_ENV]: '1' }), 'Run Lightning: Set Up Trainer (Command Palette).');
  });
});

describe('tab titles name rollouts by their labels', () => {
  const rollout = (id: string, label: string | null, createdAt: number, extra: Partial<Rollout> = {}): Rollout =>
    ({ id, label, createdAt, batchId: null, task: null, source: { kind: 'api' }, ...extra }) as Rollout;
  const pair: EditorState = {
    target: { kind: 'compare', left: 'ro-aaaaaaaaaaaaaaaa', right: 'ro-bbbbbbbbbbbbbbbb' },
    preview: false,
    selectedSpanId: null,
    overlayRunId: null,
  };

  it('Compare: the two labels once known, their ids before', () => {
    assert.equal(tabTitle(pair), 'Compare ro-aaaaaaaaa… ↔ ro-bbbbbbbbb…');
    assert.equal(
      tabTitle(pair, [
        rollout('ro-bbbbbbbbbbbbbbbb', 'Weather agent (recorded)', 2),
        rollout('ro-aaaaaaaaaaaaaaaa', 'Weather agent', 1),
      ]),
      'Compare Weather agent ↔ Weather agent (recorded)',
    );
    assert.equal(
      tabTitle({ ...pair, preview: true }, [
        rollout('ro-aaaaaaaaaaaaaaaa', null, 1, { batchId: 'b', task: { input: { question: 'What is 3 minus 7?' } } }),
      ]),
      'Compare What is 3 minus 7? ↔ ro-bbbbbbbbb… (preview)',
    );
  });

  it('Compare: two runs of one launch told apart by their start times', () => {
    const [a, b] = [new Date(2026, 0, 1, 9, 30, 5).getTime(), new Date(2026, 0, 1, 9, 31, 40).getTime()];
    assert.equal(
      tabTitle(pair, [
        rollout('ro-aaaaaaaaaaaaaaaa', 'Weather agent', a),
        rollout('ro-bbbbbbbbbbbbbbbb', 'Weather agent', b),
      ]),
      `Compare Weather agent ${formatTime(a)} ↔ Weather agent ${formatTime(b)}`,
    );
  });
});
